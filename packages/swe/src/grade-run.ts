/**
 * The test run of a pytest task under the grader: the test command's pytest replaced by the grader's
 * runner (`python/vime_grade_runner.py`, same interpreter, same environment set-up), which writes canary
 * tests into the hidden test files, starts pytest with the grader's plugin and configuration, and answers
 * with one JSON frame on its own stdout: the plugin's records (written to a descriptor the tests never
 * see), pytest's exit status as the process reported it, the canaries and the log. Nothing the code under
 * test prints can enter the frame: pytest's output goes to a pipe the runner reads into the frame's `log`
 * field, for humans only.
 */
import { randomBytes } from 'node:crypto';
import { shellJoin, shellQuote } from '@vime/core/utils';
import type { Sandbox } from '@vime/sandbox';
import { z } from 'zod';
import { sh } from './git.js';
import { pythonSource } from './python-files.js';

/** Files pytest reads its configuration from at the rootdir (pytest 7–9). */
const CONFIG_NAMES = [
  'pytest.toml',
  '.pytest.toml',
  'pytest.ini',
  '.pytest.ini',
  'pyproject.toml',
  'tox.ini',
  'setup.cfg',
];
const PYTHON_FILES = [
  'vime_grade_runner.py',
  'vime_grade_boot.py',
  'vime_grade_plugin.py',
  'vime_grade_canaries.py',
];
/** The frame's ceiling: records (≤ 32 MiB), the log's head and tail (4 MiB) and JSON's escapes. */
const MAX_FRAME_BYTES = 160 << 20;

/**
 * The test command with its pytest replaced by `<python> -I -S -B <runner> <spec>`, the rest (environment
 * set-up, arguments) as written; `undefined` when the command runs no pytest (graded from its log).
 */
export function wrapPytestCommand(testCommand: string, runner: string, spec: string): string | undefined {
  const tail = `-I -S -B ${shellJoin([runner, spec])}`;
  const module = /(^|[\s;&|(])((?:\S*\/)?python[\d.]*)((?:\s+-[A-Za-z]+)*)\s+-m\s+pytest(?=\s|$)/;
  const m = module.exec(testCommand);
  if (m)
    return `${testCommand.slice(0, m.index)}${m[1]}${m[2]} ${tail}${testCommand.slice(m.index + m[0].length)}`;
  const bare = /(^|[\s;&|(])((?:\S*\/)?(?:py\.test|pytest))(?=\s|$)/;
  const b = bare.exec(testCommand);
  if (!b) return undefined;
  // `uv run pytest`, `poetry run pytest`: the tool's environment has a `python`; elsewhere the one on PATH.
  const before = testCommand.slice(0, b.index + b[1]!.length);
  const python = /\brun\s*$/.test(before) ? 'python' : '"$(command -v python || command -v python3)"';
  return `${before}${python} ${tail}${testCommand.slice(b.index + b[0].length)}`;
}

/** What grading reads from the tests-present commit before the patch: nothing of it is the patch's. */
export interface PristineState {
  /** The configuration files pytest could read at the rootdir, as committed. */
  config: {
    candidates: Array<{ name: string; content: string }>;
    explicit: { name: string; content: string } | null;
  };
  /** The repository's top-level packages (and root modules), where they live. */
  packages: Array<{ name: string; path: string }>;
  /** Every `.py` file of those packages. */
  moduleFiles: string[];
}

/** Read the pristine state at `testsCommit` (checked out, before any patch). */
export async function readPristine(
  sandbox: Sandbox,
  testsCommit: string,
  testCommand: string,
  signal?: AbortSignal | undefined,
): Promise<PristineState> {
  const list = await sh(sandbox, `git ls-tree -r --name-only -z ${shellQuote(testsCommit)}`, {
    signal,
    maxOutputBytes: 64 << 20,
  });
  if (list.exitCode !== 0 || list.truncated)
    throw new Error(`git ls-tree failed: ${list.output.slice(-400)}`);
  const files = list.stdout.split('\0').filter(Boolean);
  const packages = packagesOf(files);
  const homes = packages.filter((p) => !p.path.endsWith('.py')).map((p) => `${p.path}/`);
  const moduleFiles = files.filter((f) => f.endsWith('.py') && homes.some((h) => f.startsWith(h)));
  const show = async (path: string) => {
    const r = await sh(sandbox, `git show ${shellQuote(`${testsCommit}:${path}`)}`, {
      signal,
      maxOutputBytes: 4 << 20,
    });
    if (r.exitCode !== 0 || r.truncated) throw new Error(`git show ${path} failed: ${r.output.slice(-400)}`);
    return r.stdout;
  };
  const present = new Set(files);
  const candidates = [];
  for (const name of CONFIG_NAMES)
    if (present.has(name)) candidates.push({ name, content: await show(name) });
  const given = explicitConfig(testCommand);
  let explicit: PristineState['config']['explicit'] = null;
  if (given === '/dev/null') explicit = { name: 'none.ini', content: '' };
  else if (given !== undefined && present.has(given.replace(/^\.\//, '')))
    explicit = { name: given, content: await show(given.replace(/^\.\//, '')) };
  return { config: { candidates, explicit }, packages, moduleFiles };
}

/** `-c FILE` / `--config-file FILE` named by the test command itself (e.g. SWE-smith's mido: `-c /dev/null`). */
function explicitConfig(testCommand: string): string | undefined {
  const m = /(?:^|\s)(?:-c\s*|--config-file[=\s])(\S+)/.exec(testCommand);
  return m?.[1]?.replace(/^['"]|['"]$/g, '');
}

/** Top-level packages (`x/__init__.py`, `src/x/__init__.py`) and root modules (`x.py`, scripts excepted). */
function packagesOf(files: readonly string[]): Array<{ name: string; path: string }> {
  const out: Array<{ name: string; path: string }> = [];
  const seen = new Set<string>();
  for (const f of files) {
    const m = /^(?:src\/)?([A-Za-z_][A-Za-z0-9_]*)\/__init__\.py$/.exec(f);
    const r = /^([A-Za-z_][A-Za-z0-9_]*)\.py$/.exec(f);
    const name = m?.[1] ?? r?.[1];
    if (!name || seen.has(name) || (r && /^(setup|conftest|noxfile|fabfile|tasks|manage)$/.test(name)))
      continue;
    seen.add(name);
    out.push({ name, path: m ? f.slice(0, -'/__init__.py'.length) : f });
  }
  return out;
}

/**
 * The repository's packages, then the modules of theirs that the patch changed (`a/b.py` → `a.b`): what
 * the grader imports before pytest, so code that behaves one way when pytest is imported meets no pytest.
 * A module the patch added runs only when one of these imports it, as it would without the grader.
 */
export function modulesToPreimport(
  packages: PristineState['packages'],
  changed: readonly string[],
  moduleFiles: readonly string[],
): string[] {
  const dirs = packages.filter((p) => !p.path.endsWith('.py'));
  const out = dirs.map((p) => p.name);
  const existing = new Set(moduleFiles);
  for (const file of [...changed].filter((f) => existing.has(f)).sort()) {
    const home = dirs.find((p) => file.startsWith(`${p.path}/`));
    if (!home || !file.endsWith('.py') || /(^|\/)(__main__|conftest)\.py$/.test(file)) continue;
    const parts = file.slice(home.path.length + 1, -3).split('/');
    if (parts.at(-1) === '__init__') parts.pop();
    if (parts.every((p) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(p))) out.push([home.name, ...parts].join('.'));
  }
  return [...new Set(out)];
}

const recordSchema = z.looseObject({ k: z.string(), s: z.number().int() });
const frameSchema = z.object({
  v: z.literal(1),
  exit: z.union([z.object({ code: z.number().int() }), z.object({ signal: z.number().int() })]),
  records: z.array(recordSchema),
  evidence: z.array(z.string()),
  overflow: z.boolean(),
  canaries: z.array(
    z.object({
      id: z.string(),
      expect: z.enum(['fail', 'pass', 'not_pass']),
      kind: z.string(),
      of: z.string().optional(),
    }),
  ),
  plantNotes: z.array(z.string()),
  log: z.string(),
  logBytes: z.number(),
});
export type RunFrame = z.infer<typeof frameSchema>;
export type RunRecord = z.infer<typeof recordSchema>;

/** How the run ended, as the grader saw it from outside. */
export type ChannelRun =
  | { kind: 'frame'; frame: RunFrame }
  | { kind: 'timeout'; output: string }
  | { kind: 'cut_short'; output: string }
  | { kind: 'runner_failed'; message: string };

export interface ChannelRunInput {
  workdir: string;
  testCommand: string;
  /** Hidden test files and, per file, the F2P test ids relative to it (`name`, `Class::name[param]`). */
  hidden: Array<{ path: string; f2p: string[] }>;
  /** The F2P and P2P ids of the task, as the dataset names them. */
  wanted: string[];
  /** Paths the patch added or changed: its modules are imported before pytest is. */
  changed: readonly string[];
  pristine: PristineState;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
}

/** Put the runner in the sandbox, run the wrapped test command, and read the frame. */
export async function runWithChannel(sandbox: Sandbox, input: ChannelRunInput): Promise<ChannelRun> {
  const dir = `/tmp/.vime-grade-${randomBytes(8).toString('hex')}`;
  const op = input.signal ? { signal: input.signal } : {};
  for (const name of PYTHON_FILES) await sandbox.writeFile(`${dir}/${name}`, pythonSource(name), op);
  const spec = {
    workdir: input.workdir,
    boot: `${dir}/vime_grade_boot.py`,
    hidden: input.hidden,
    wanted: input.wanted,
    config: input.pristine.config,
    packages: input.pristine.packages,
    moduleFiles: input.pristine.moduleFiles,
    preimport: modulesToPreimport(input.pristine.packages, input.changed, input.pristine.moduleFiles),
  };
  await sandbox.writeFile(`${dir}/spec.json`, JSON.stringify(spec), op);
  const command = wrapPytestCommand(input.testCommand, `${dir}/vime_grade_runner.py`, `${dir}/spec.json`);
  if (command === undefined) throw new Error(`the test command runs no pytest: ${input.testCommand}`);
  // A plain exec: its stdout is a pipe to this process (no file in the sandbox that a test could rewrite).
  const r = await sandbox.exec(['bash', '-c', `cd ${shellQuote(input.workdir)} && ${command}`], {
    timeoutMs: input.timeoutMs,
    maxOutputBytes: MAX_FRAME_BYTES,
    ...op,
  });
  if (r.timedOut) return { kind: 'timeout', output: r.stderr };
  // The runner's stderr is out of the tests' reach: it either never started, or failed on its own.
  if (!/^vime-grade-runner: started$/m.test(r.stderr) || r.exitCode === 3) {
    return {
      kind: 'runner_failed',
      message: `the grader's runner ${/started/.test(r.stderr) ? 'failed' : 'did not start'} (exit ${r.exitCode}): ${r.stderr.trim().slice(-2000)}`,
    };
  }
  // No frame: something stopped the runner (a test can kill it; it cannot write its stdout).
  const cut = (why: string) => ({
    kind: 'cut_short' as const,
    output: `the grader's runner gave no report (${why}, exit ${r.exitCode}): ${r.stderr.slice(-3000)}`,
  });
  if (r.truncated) return cut('its output was cut');
  let parsed: unknown;
  try {
    parsed = JSON.parse(r.stdout);
  } catch {
    return cut(`its stdout is not JSON: ${JSON.stringify(r.stdout.slice(0, 200))}`);
  }
  const frame = frameSchema.safeParse(parsed);
  if (!frame.success) return cut(`its frame does not match: ${frame.error.message.slice(0, 300)}`);
  const boot = frame.data.records.find((rec) => rec.k === 'boot_failed');
  if (boot) {
    return {
      kind: 'runner_failed',
      message: `the grader's pytest start-up failed: ${String(boot.error).slice(-3000)}`,
    };
  }
  return { kind: 'frame', frame: frame.data };
}
