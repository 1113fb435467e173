/**
 * `vime launch check DIR`: does a rendered Job Group refer only to what exists? Static, against a checkout
 * of the repository the jobs run in (their SkyPilot workdir):
 *
 * - every script a job's setup or run names exists, and so does every file those scripts run or import
 *   (`bash x.sh`, `node … x.ts`, `python3 x.py`, relative imports of TypeScript files and imports of the
 *   workspace's own packages), followed transitively;
 * - every env var a job sets is read by one of those files (`$NAME`/`${NAME…}` in shell, `env.NAME` in
 *   TypeScript, `environ[…]`/`getenv(…)` in Python);
 * - for the trainer, the slime command `vime ray submit` builds from the job's own env: each
 *   `module.function` flag names a function defined in a module on the job's `PYTHONPATH`, and each
 *   checkpoint it loads (`--hf-checkpoint`, `--ref-load`) is a path the trainer's setup provides.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { slimeArgs } from '@vime/slime';
import { parseAllDocuments } from 'yaml';
import { type LaunchConfig, type LaunchPlan, resolvePlan } from '../plan.js';
import { slimeJobRequest } from '../ray/job.js';

/** One problem of a rendered Job Group: the job, a message and where. */
export interface LaunchProblem {
  /** Job name, or `job-group` for the file itself. */
  job: string;
  kind: 'script' | 'env' | 'module' | 'checkpoint' | 'file';
  message: string;
}

/** What `checkRenderedJobGroup` found, and what it followed per job. */
export interface LaunchCheckReport {
  problems: LaunchProblem[];
  /** Per job: the files followed (relative to the root) and the env vars each set var is read by. */
  jobs: Array<{ name: string; files: string[]; envs: Record<string, string[]> }>;
}

interface Job {
  name: string;
  setup?: string | undefined;
  run?: string | undefined;
  envs?: Record<string, unknown> | undefined;
}

/** Where SkyPilot syncs the workdir on every node. */
const REMOTE_WORKDIR = '/root/sky_workdir';
/** Flags whose value is `module.function` that slime imports. */
const FUNCTION_FLAGS = /^--(custom-[a-z-]+-path|dynamic-sampling-filter-path|rollout-sample-filter-path)$/;
/** Checkpoints slime reads and the trainer's setup must provide. */
const CHECKPOINT_FLAGS = ['--hf-checkpoint', '--ref-load'];

/** A line that runs something; each script path on it is a file the job needs. */
const RUNNER = /(?:^|[\s;&|(])(?:bash|sh|node|python3?|tsx)\s/;
const SCRIPT = /(?:^|[\s"'=(])((?:\.{1,2}\/)?[\w.-]+(?:\/[\w.-]+)+\.(?:sh|ts|py))(?=$|[\s"';)&|])/g;
const IMPORTS = /\bfrom\s+['"](\.{1,2}\/[^'"]+)\.js['"]/g;
/** Imports of the workspace's own packages (`@vime/loop`, `@vime/core/utils`), followed into their source. */
const PACKAGE_IMPORTS = /\bfrom\s+['"]@vime\/([a-z-]+)(\/[a-z-]+)?['"]/g;

/** The source file a workspace package import names (its `@vime/source` export), if the checkout has it. */
function packageSource(root: string, name: string, subpath: string | undefined): string | undefined {
  const manifest = join(root, 'packages', name, 'package.json');
  if (!existsSync(manifest)) return undefined;
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    exports?: Record<string, { '@vime/source'?: string | undefined } | string> | undefined;
  };
  const entry = exports?.[subpath ? `.${subpath}` : '.'];
  const source = typeof entry === 'object' ? entry['@vime/source'] : undefined;
  return source && relative(root, join(root, 'packages', name, source));
}

/** Script paths that `text` runs and that belong to the workdir (their first folder is the checkout's). */
function scriptsRun(text: string, root: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (/^\s*#/.test(line) || !RUNNER.test(line)) continue;
    for (const m of line.matchAll(SCRIPT)) {
      const path = m[1]!;
      if (path.startsWith('.') || existsSync(join(root, path.split('/')[0]!))) out.push(path);
    }
  }
  return out;
}

function readsOf(text: string, file: string): Set<string> {
  const out = new Set<string>();
  const patterns = file.endsWith('.sh')
    ? [/\$\{?([A-Z_][A-Z0-9_]*)/g]
    : file.endsWith('.py')
      ? [/environ(?:\.get)?\s*[([]\s*["']([A-Z_][A-Z0-9_]*)/g, /getenv\(\s*["']([A-Z_][A-Z0-9_]*)/g]
      : [/\benv\.([A-Z_][A-Z0-9_]*)/g, /\benv\[\s*['"]([A-Z_][A-Z0-9_]*)/g];
  for (const pattern of patterns) for (const m of text.matchAll(pattern)) out.add(m[1]!);
  return out;
}

/** The files a command line and what it runs refer to, transitively (paths relative to `root`). */
function follow(
  root: string,
  command: string,
  missing: (path: string, from: string) => void,
): Map<string, string> {
  const texts = new Map<string, string>();
  const queue: Array<[string, string]> = scriptsRun(command, root).map((path) => [path, 'the command']);
  while (queue.length) {
    const [path, from] = queue.shift()!;
    if (path.includes('$') || texts.has(path)) continue;
    const full = resolve(root, path);
    if (!existsSync(full)) {
      missing(path, from);
      continue;
    }
    const text = readFileSync(full, 'utf8');
    texts.set(path, text);
    for (const next of scriptsRun(text, root)) queue.push([next, path]);
    if (path.endsWith('.ts')) {
      for (const m of text.matchAll(IMPORTS)) {
        queue.push([relative(root, resolve(dirname(full), `${m[1]}.ts`)), path]);
      }
      for (const m of text.matchAll(PACKAGE_IMPORTS)) {
        const source = packageSource(root, m[1]!, m[2]);
        if (source) queue.push([source, path]);
      }
    }
  }
  return texts;
}

/** `${NAME:-default}`, `${NAME}` and `$NAME` expanded from `env` (unset names keep their default or stay). */
function expandShell(text: string, env: Record<string, string>): string {
  return text
    .replace(/\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}/g, (_, n: string, d: string) => env[n] || d)
    .replace(
      /\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)/g,
      (all, a?: string, b?: string) => env[(a ?? b)!] ?? all,
    );
}

/** Check the Job Group in `dir/job-group.yaml` against the repository at `root`. */
export function checkRenderedJobGroup(dir: string, root: string): LaunchCheckReport {
  const problems: LaunchProblem[] = [];
  const file = join(dir, 'job-group.yaml');
  if (!existsSync(file)) {
    return {
      problems: [
        {
          job: 'job-group',
          kind: 'file',
          message: `${file} does not exist; render it with vime skypilot render --out ${dir}`,
        },
      ],
      jobs: [],
    };
  }
  const docs = parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJS() as Job);
  const jobs: LaunchCheckReport['jobs'] = [];
  for (const job of docs.slice(1)) {
    const envs = Object.fromEntries(Object.entries(job.envs ?? {}).map(([k, v]) => [k, String(v)]));
    const missing = (path: string, from: string) =>
      problems.push({ job: job.name, kind: 'script', message: `${path} (run by ${from}) does not exist` });
    const setup = follow(root, job.setup ?? '', missing);
    const files = new Map([...setup, ...follow(root, job.run ?? '', missing)]);
    const readers: Record<string, string[]> = {};
    for (const name of Object.keys(envs)) {
      readers[name] = [...files]
        .filter(([path, text]) => readsOf(text, path).has(name))
        .map(([path]) => path);
      if (readers[name].length === 0) {
        problems.push({
          job: job.name,
          kind: 'env',
          message: `${name} is set but nothing the job runs reads it (${[...files.keys()].join(', ') || 'no files'})`,
        });
      }
    }
    jobs.push({ name: job.name, files: [...files.keys()], envs: readers });
    if (envs.VIME_LAUNCH_CONFIG !== undefined) checkTrainer(job.name, envs, setup, root, problems);
  }
  return { problems, jobs };
}

function checkTrainer(
  name: string,
  envs: Record<string, string>,
  setup: Map<string, string>,
  root: string,
  problems: LaunchProblem[],
): void {
  let config: unknown;
  try {
    config = JSON.parse(envs.VIME_LAUNCH_CONFIG!);
  } catch (error) {
    problems.push({
      job: name,
      kind: 'env',
      message: `VIME_LAUNCH_CONFIG is not JSON: ${(error as Error).message}`,
    });
    return;
  }
  const env = { ...envs, HOME: '/root' };
  let plan: LaunchPlan;
  try {
    plan = resolvePlan(config as LaunchConfig, { env });
  } catch (error) {
    problems.push({ job: name, kind: 'env', message: `VIME_LAUNCH_CONFIG: ${(error as Error).message}` });
    return;
  }
  const request = slimeJobRequest(plan, { env });
  const args = slimeArgs(plan.slime).args;
  const flagValue = (flag: string) => {
    const at = args.indexOf(flag);
    return at < 0 ? undefined : args[at + 1];
  };
  // Module folders on the job's PYTHONPATH that are part of the workdir, as they are in this checkout.
  const pythonPath = String(request.runtime_env?.env_vars?.PYTHONPATH ?? '').split(':');
  const local = pythonPath
    .filter((p) => p.startsWith(`${REMOTE_WORKDIR}/`))
    .map((p) => resolve(root, p.slice(REMOTE_WORKDIR.length + 1)));
  args.forEach((flag, i) => {
    if (!FUNCTION_FLAGS.test(flag)) return;
    const value = args[i + 1]!;
    const dot = value.lastIndexOf('.');
    const module = value.slice(0, dot).replaceAll('.', '/');
    const fn = value.slice(dot + 1);
    const found = local.map((d) => join(d, `${module}.py`)).find((p) => existsSync(p));
    if (!found) {
      problems.push({
        job: name,
        kind: 'module',
        message: `${flag} ${value}: no ${module}.py in the job's PYTHONPATH folders of the workdir (${local.map((d) => relative(root, d)).join(', ') || 'none'})`,
      });
    } else if (!new RegExp(`^(?:async\\s+)?def\\s+${fn}\\(`, 'm').test(readFileSync(found, 'utf8'))) {
      problems.push({
        job: name,
        kind: 'module',
        message: `${flag} ${value}: ${relative(root, found)} defines no ${fn}()`,
      });
    }
  });
  const setupText = [...setup.values()].map((text) => expandShell(text, env)).join('\n');
  for (const flag of CHECKPOINT_FLAGS) {
    const path = flagValue(flag);
    if (path && !setupText.includes(path)) {
      problems.push({
        job: name,
        kind: 'checkpoint',
        message: `${flag} ${path}: nothing in the job's setup provides it`,
      });
    }
  }
}
