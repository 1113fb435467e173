/**
 * The `vime` command line. `main` takes argv and an IO object and returns the exit code, so tests run
 * it in-process; `src/cli.ts` binds it to the real process.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, shellJoin, VimeError } from '@vime/core';
import { parse as parseYaml } from 'yaml';
import { type EngineStatus, waitForEngines } from '../engines/health.js';
import { expandEnv, type LaunchConfig, type LaunchPlan, resolvePlan } from '../plan.js';
import { preflight } from '../preflight.js';
import { RayJobFailedError, RayJobsClient } from '../ray/client.js';
import { redactRequest, slimeJobRequest } from '../ray/job.js';
import { renderJobGroup, renderVolume } from '../skypilot/render.js';
import { formatProblem, validateSkyPilotYaml } from '../skypilot/validate.js';
import { slimeArgs } from '../slime/args.js';

export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: Record<string, string | undefined>;
  cwd: string;
  signal?: AbortSignal;
}

/** Exit codes (documented in the README and `vime --help`). */
export const EXIT = { ok: 0, failed: 1, usage: 2, checks: 3, interrupted: 130 } as const;

class UsageError extends ConfigError {}

const PLAN_OPTIONS = {
  config: { type: 'string', short: 'c' },
  engines: { type: 'string' },
  'engine-kind': { type: 'string' },
  'engine-accelerators': { type: 'string' },
  'trainer-accelerators': { type: 'string' },
  name: { type: 'string' },
  mode: { type: 'string' },
  'weight-mode': { type: 'string' },
  'weight-transport': { type: 'string' },
  tp: { type: 'string' },
  'batch-size': { type: 'string' },
  'samples-per-prompt': { type: 'string' },
  'pool-replicas': { type: 'string' },
  infra: { type: 'string' },
  image: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;
const PLAN_HELP = `Plan options (override the config file; defaults are the reference coding-agent run):
  -c, --config FILE             YAML or JSON launch config
  --engines N                   inference engine jobs (default 1)
  --engine-kind sglang|vllm     engine server (default sglang)
  --engine-accelerators A:N     GPUs per engine job (default H100:1)
  --trainer-accelerators A:N    trainer GPUs (default H100:4)
  --name NAME                   Job Group name (default coding-agent-rl[-Neng])
  --mode async|sync             train_async.py or train.py (default async)
  --weight-mode delta|full      weight update mode (default delta)
  --weight-transport disk|nccl  weight update transport (default disk)
  --tp N                        tensor parallel size (default 4)
  --batch-size N                prompts per rollout step (default 23)
  --samples-per-prompt N        rollouts per prompt (default 8)
  --pool-replicas N             warm sandboxes per repo pool (default 184)
  --infra INFRA, --image IMAGE  placement and container image for every job`;

const RAY_OPTIONS = {
  address: { type: 'string' },
  'token-file': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;
const RAY_HELP = `Ray options:
  --address URL       dashboard URL (default: config ray.address, $RAY_ADDRESS, http://127.0.0.1:8265)
  --token-file FILE   token for RAY_AUTH_MODE=token clusters (default: $RAY_AUTH_TOKEN)`;

const HELP: Record<string, string> = {
  '': `vime: launch agentic RL runs (SkyPilot Job Groups, slime, Ray Jobs)

Usage: vime <command> [options]

Commands:
  plan                     print the resolved plan and its preflight report
  skypilot render          write DIR/job-group.yaml and DIR/volume.yaml
  skypilot validate FILE   check SkyPilot YAML against SkyPilot's loader rules
  slime args               print slime's argv for the plan
  ray submit [-- CMD...]   submit the plan's slime command (or CMD) as a Ray job
  ray status [ID]          show a job (or list all jobs)
  ray logs ID              print a job's log (--follow to keep reading)
  ray stop ID              stop a job
  engines wait [URL...]    wait until every inference engine is healthy

Run \`vime <command> --help\` for a command's options.

Exit codes:
  0    success
  1    the operation failed (job FAILED/STOPPED, engines not healthy, HTTP or connection error)
  2    invalid usage or configuration (unknown flag, bad value, combination slime rejects)
  3    checks found problems (preflight, YAML validation)
  130  interrupted`,
  plan: `Usage: vime plan [options] [--json]

Resolve the plan (Job Group, volume, slime command) and run preflight. Exits 3 when preflight finds errors.

  --json   print the resolved plan and report as JSON

${PLAN_HELP}`,
  'skypilot render': `Usage: vime skypilot render [options] --out DIR

Write DIR/job-group.yaml (header, engine jobs, trainer) and DIR/volume.yaml, checked against SkyPilot's
loader rules. Launch with: sky volumes apply DIR/volume.yaml && sky jobs launch -n NAME DIR/job-group.yaml

  --out DIR   output directory (created if missing)

${PLAN_HELP}`,
  'skypilot validate': `Usage: vime skypilot validate FILE... [--kind task|job-group|pipeline|volume]

Check SkyPilot YAML files; prints every problem with its document and path. Exits 3 on errors.`,
  'slime args': `Usage: vime slime args [options] [--json]

Print the slime command (python3 train_async.py|train.py ...) as one shell line, or as a JSON array.

${PLAN_HELP}`,
  'ray submit': `Usage: vime ray submit [options] [--submission-id ID] [--no-wait] [-- CMD...]

Submit CMD, or the plan's slime command, as a Ray job. The submission id is the idempotency key: submitting
the same id again returns the existing job and never starts a second run. Without --no-wait, follows the log
and exits 0 when the job SUCCEEDED, 1 when it FAILED or was STOPPED (with the last log lines on stderr).

  --submission-id ID   idempotency key (default: generated)
  --no-wait            print the submission id and return
  --dry-run            print the request (secrets redacted) without sending it

${RAY_HELP}

${PLAN_HELP}`,
  'ray status': `Usage: vime ray status [ID] [--json]\n\nShow one job's status, or list all jobs.\n\n${RAY_HELP}`,
  'ray logs': `Usage: vime ray logs ID [--follow]\n\nPrint a job's log; --follow keeps polling until the job ends.\n\n${RAY_HELP}`,
  'ray stop': `Usage: vime ray stop ID\n\nStop a running job (prints whether it was running).\n\n${RAY_HELP}`,
  'engines wait': `Usage: vime engines wait [URL...] [--kind sglang|vllm] [--timeout 30m]

Poll each engine's health endpoint (SGLang /health_generate, vLLM /health) with backoff until every one is
healthy. Without URLs, waits for the plan's engines (<job>-0.$SKYPILOT_JOBGROUP_NAME:<port>). Exits 1 naming
the engines that never came up.

  --kind sglang|vllm   engine kind for health paths (default: the plan's)
  --timeout DURATION   overall deadline (default 30m)
  --stable N           consecutive healthy answers required (default 2)

${PLAN_HELP}`,
};

function int(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--${flag} expects a positive whole number, got ${JSON.stringify(value)}`);
  return n;
}

type Values = Record<string, string | boolean | string[] | undefined>;

async function loadConfig(values: Values, io: CliIo): Promise<LaunchConfig> {
  let config: Record<string, unknown> = {};
  const file = values.config as string | undefined;
  if (file) {
    const path = resolve(io.cwd, file);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (cause) {
      throw new UsageError(`cannot read config ${file}: ${(cause as Error).message}`, { cause });
    }
    const parsed: unknown = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
    if (parsed !== null && (typeof parsed !== 'object' || Array.isArray(parsed))) {
      throw new UsageError(`config ${file} must hold a mapping of launch settings`);
    }
    config = (parsed as Record<string, unknown> | null) ?? {};
  }
  const set = (path: string[], value: unknown) => {
    if (value === undefined) return;
    let node = config;
    for (const key of path.slice(0, -1)) {
      node[key] = { ...((node[key] as Record<string, unknown> | undefined) ?? {}) };
      node = node[key] as Record<string, unknown>;
    }
    node[path.at(-1)!] = value;
  };
  set(['engines', 'count'], int(values.engines as string | undefined, 'engines'));
  set(['engines', 'kind'], values['engine-kind']);
  set(['engines', 'accelerators'], values['engine-accelerators']);
  set(['trainer', 'accelerators'], values['trainer-accelerators']);
  set(['name'], values.name);
  set(['mode'], values.mode);
  set(['weights', 'mode'], values['weight-mode']);
  set(['weights', 'transport'], values['weight-transport']);
  set(['model', 'tensorParallel'], int(values.tp as string | undefined, 'tp'));
  set(['rollout', 'batchSize'], int(values['batch-size'] as string | undefined, 'batch-size'));
  set(
    ['rollout', 'samplesPerPrompt'],
    int(values['samples-per-prompt'] as string | undefined, 'samples-per-prompt'),
  );
  set(['sandbox', 'poolReplicas'], int(values['pool-replicas'] as string | undefined, 'pool-replicas'));
  set(['infra'], values.infra);
  set(['image'], values.image);
  return config as LaunchConfig;
}

async function planFrom(values: Values, io: CliIo): Promise<LaunchPlan> {
  return resolvePlan(await loadConfig(values, io), { env: io.env });
}

async function rayClient(values: Values, io: CliIo): Promise<RayJobsClient> {
  let token = io.env.RAY_AUTH_TOKEN;
  const tokenFile = values['token-file'] as string | undefined;
  if (tokenFile) token = (await readFile(resolve(io.cwd, tokenFile), 'utf8')).trim();
  let address = values.address as string | undefined;
  if (!address && values.config) address = (await planFrom(values, io)).config.ray.address;
  address ??= io.env.RAY_ADDRESS ?? 'http://127.0.0.1:8265';
  return new RayJobsClient({ address, ...(token ? { token } : {}) });
}

function printPlan(plan: LaunchPlan, io: CliIo): void {
  const jg = plan.jobGroup;
  io.stdout(`Job Group ${jg.name} (${jg.infra})\n`);
  io.stdout(
    `  ${jg.trainer.name.padEnd(10)} ${jg.trainer.accelerators}${jg.trainer.numNodes > 1 ? ` x ${jg.trainer.numNodes} nodes` : ''}\n`,
  );
  for (const job of plan.engineJobs)
    io.stdout(
      `  ${job.padEnd(10)} ${jg.engines.accelerators} (${jg.engines.kind}, port ${jg.engines.port})\n`,
    );
  io.stdout(`Engines (from the trainer): ${plan.engineUrls.join(' ')}\n`);
  if (jg.volume)
    io.stdout(
      `Volume ${jg.volume.name}: ${jg.volume.size} ${jg.volume.accessMode} at ${jg.volume.mountPath}\n`,
    );
  const s = plan.slime;
  io.stdout(
    `slime: ${s.mode} · weights ${s.weights.mode} over ${s.weights.transport} · batch ${s.rollout.batchSize} × ${s.rollout.samplesPerPrompt} = ${s.rollout.batchSize * s.rollout.samplesPerPrompt} concurrent rollouts · TP ${s.parallelism.tensor}\n`,
  );
}

async function run(argv: string[], io: CliIo): Promise<number> {
  const [first, second] = argv;
  if (!first || first === '--help' || first === '-h' || first === 'help') {
    io.stdout(`${HELP['']}\n`);
    return first ? EXIT.ok : EXIT.usage;
  }
  const twoWord = ['skypilot', 'slime', 'ray', 'engines'].includes(first);
  const command = twoWord ? `${first} ${second ?? ''}`.trim() : first;
  if (!(command in HELP)) {
    const known = Object.keys(HELP).filter(Boolean);
    throw new UsageError(`unknown command "${command}"; commands: ${known.join(', ')}`);
  }
  const rest = argv.slice(twoWord ? 2 : 1);
  const parse = <
    O extends Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>,
  >(
    options: O,
  ) => {
    try {
      return parseArgs({ args: rest, options, allowPositionals: true, strict: true });
    } catch (cause) {
      throw new UsageError(
        `${(cause as Error).message.replace(/\. To specify.*$/s, '')}; see \`vime ${command} --help\``,
        { cause },
      );
    }
  };

  switch (command) {
    case 'plan': {
      const { values } = parse({ ...PLAN_OPTIONS, json: { type: 'boolean' } });
      if (values.help) return help(command, io);
      const plan = await planFrom(values, io);
      const report = preflight(plan);
      if (values.json) {
        io.stdout(
          `${JSON.stringify({ plan: { ...plan, env: undefined }, slime: slimeArgs(plan.slime).argv, preflight: report }, null, 2)}\n`,
        );
      } else {
        printPlan(plan, io);
        io.stdout(`Command: ${shellJoin(slimeArgs(plan.slime).argv, { expandVariables: true })}\n`);
        io.stdout(report.problems.length ? 'Preflight:\n' : 'Preflight: ok\n');
        for (const p of report.problems)
          io.stdout(`  ${p.severity === 'error' ? 'error' : 'warning'} ${p.path}: ${p.message}\n`);
      }
      return report.ok ? EXIT.ok : EXIT.checks;
    }
    case 'skypilot render': {
      const { values } = parse({ ...PLAN_OPTIONS, out: { type: 'string', short: 'o' } });
      if (values.help) return help(command, io);
      if (!values.out)
        throw new UsageError('--out DIR is required (where job-group.yaml and volume.yaml go)');
      const plan = await planFrom(values, io);
      const dir = resolve(io.cwd, values.out);
      const files = {
        'job-group.yaml': renderJobGroup(plan.jobGroup),
        'volume.yaml': renderVolume(plan.volume),
      };
      let errors = 0;
      for (const [name, text] of Object.entries(files)) {
        const problems = validateSkyPilotYaml(text).problems;
        for (const p of problems) io.stderr(`${name}: ${formatProblem(p)}\n`);
        errors += problems.filter((p) => p.severity === 'error').length;
      }
      if (errors) return EXIT.checks;
      await mkdir(dir, { recursive: true });
      for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
      io.stdout(
        `wrote ${join(values.out, 'job-group.yaml')} (${plan.engineJobs.length} engine(s): ${plan.engineJobs.join(', ')}) and ${join(values.out, 'volume.yaml')}\n`,
      );
      io.stdout(
        `next: sky volumes apply ${join(values.out, 'volume.yaml')} && sky jobs launch -n ${plan.jobGroup.name} ${join(values.out, 'job-group.yaml')}${plan.jobGroup.trainer.secrets.map((s) => ` --secret ${s}`).join('')}\n`,
      );
      return EXIT.ok;
    }
    case 'skypilot validate': {
      const { values, positionals } = parse({
        kind: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      });
      if (values.help) return help(command, io);
      if (!positionals.length) throw new UsageError('name at least one YAML file to validate');
      const kinds = ['task', 'job-group', 'pipeline', 'volume'];
      if (values.kind && !kinds.includes(values.kind))
        throw new UsageError(`--kind must be one of ${kinds.join(', ')}`);
      let errors = 0;
      for (const file of positionals) {
        const text = await readFile(resolve(io.cwd, file), 'utf8');
        const result = validateSkyPilotYaml(text, values.kind ? { kind: values.kind as 'task' } : {});
        for (const p of result.problems) io.stdout(`${file}: ${formatProblem(p)}\n`);
        if (result.ok) io.stdout(`${file}: ok (${result.kind})\n`);
        else errors++;
      }
      return errors ? EXIT.checks : EXIT.ok;
    }
    case 'slime args': {
      const { values } = parse({ ...PLAN_OPTIONS, json: { type: 'boolean' } });
      if (values.help) return help(command, io);
      const { argv: command_ } = slimeArgs((await planFrom(values, io)).slime);
      io.stdout(
        values.json ? `${JSON.stringify(command_)}\n` : `${shellJoin(command_, { expandVariables: true })}\n`,
      );
      return EXIT.ok;
    }
    case 'ray submit': {
      const { values, positionals } = parse({
        ...PLAN_OPTIONS,
        ...RAY_OPTIONS,
        'submission-id': { type: 'string' },
        'no-wait': { type: 'boolean' },
        'dry-run': { type: 'boolean' },
      });
      if (values.help) return help(command, io);
      const plan = await planFrom(values, io);
      const base = slimeJobRequest(plan, {
        env: io.env,
        ...(values['submission-id'] ? { submissionId: values['submission-id'] } : {}),
      });
      const request = positionals.length
        ? { ...base, entrypoint: shellJoin(positionals, { expandVariables: true }) }
        : base;
      if (values['dry-run']) {
        io.stdout(`${JSON.stringify(redactRequest(request), null, 2)}\n`);
        return EXIT.ok;
      }
      const client = await rayClient(values, io);
      client.on('retry', (r) =>
        io.stderr(`ray: submission rejected (${r.reason}); retry ${r.attempt} in ${r.delayMs / 1000}s\n`),
      );
      const signal = io.signal;
      const { submissionId, existing } = await client.submit(request, signal ? { signal } : {});
      io.stderr(`${existing ? 'already submitted' : 'submitted'}: ${submissionId}\n`);
      if (values['no-wait']) {
        io.stdout(`${submissionId}\n`);
        return EXIT.ok;
      }
      for await (const chunk of client.tail(submissionId, signal ? { signal } : {})) io.stdout(chunk);
      await client.wait(submissionId, signal ? { signal } : {});
      return EXIT.ok;
    }
    case 'ray status': {
      const { values, positionals } = parse({ ...PLAN_OPTIONS, ...RAY_OPTIONS, json: { type: 'boolean' } });
      if (values.help) return help(command, io);
      const client = await rayClient(values, io);
      const jobs = positionals.length
        ? await Promise.all(positionals.map((id) => client.get(id)))
        : await client.list();
      if (values.json) io.stdout(`${JSON.stringify(positionals.length === 1 ? jobs[0] : jobs, null, 2)}\n`);
      else {
        for (const job of jobs) {
          const id = job.submission_id ?? job.job_id ?? '?';
          io.stdout(`${id}\t${job.status}\t${job.type}\t${(job.message ?? '').split('\n')[0]}\n`);
        }
      }
      return EXIT.ok;
    }
    case 'ray logs': {
      const { values, positionals } = parse({
        ...PLAN_OPTIONS,
        ...RAY_OPTIONS,
        follow: { type: 'boolean', short: 'f' },
      });
      if (values.help) return help(command, io);
      const [id] = positionals;
      if (!id) throw new UsageError('name the job: vime ray logs ID');
      const client = await rayClient(values, io);
      if (values.follow) {
        for await (const chunk of client.tail(id, io.signal ? { signal: io.signal } : {})) io.stdout(chunk);
      } else {
        io.stdout(await client.logs(id));
      }
      return EXIT.ok;
    }
    case 'ray stop': {
      const { values, positionals } = parse({ ...PLAN_OPTIONS, ...RAY_OPTIONS });
      if (values.help) return help(command, io);
      const [id] = positionals;
      if (!id) throw new UsageError('name the job: vime ray stop ID');
      const stopped = await (await rayClient(values, io)).stop(id);
      io.stdout(stopped ? `stopping ${id}\n` : `${id} had already ended\n`);
      return EXIT.ok;
    }
    case 'engines wait': {
      const { values, positionals } = parse({
        ...PLAN_OPTIONS,
        kind: { type: 'string' },
        timeout: { type: 'string' },
        stable: { type: 'string' },
      });
      if (values.help) return help(command, io);
      const plan = await planFrom(values, io);
      const kind = (values.kind ?? plan.jobGroup.engines.kind) as 'sglang';
      if (kind !== 'sglang' && kind !== 'vllm') throw new UsageError('--kind must be sglang or vllm');
      const urls = positionals.length ? positionals : plan.engineUrls.map((u) => expandEnv(u, io.env));
      const stable = int(values.stable, 'stable');
      io.stderr(`waiting for ${urls.length} engine(s): ${urls.join(' ')}\n`);
      let statuses: EngineStatus[];
      try {
        statuses = await waitForEngines(urls, {
          deadline: values.timeout ?? '30m',
          kind,
          ...(stable ? { stableChecks: stable } : {}),
          ...(io.signal ? { signal: io.signal } : {}),
          onState: (s) =>
            io.stderr(
              `${s.url}: ${s.state}${s.lastError && s.state !== 'healthy' ? ` (${s.lastError})` : ''}\n`,
            ),
        });
      } catch (error) {
        if (VimeError.isInstance(error) && error.data?.engines) {
          for (const s of error.data.engines as EngineStatus[]) {
            io.stdout(`${s.url}\t${s.state}\t${s.attempts} checks\tfirst error: ${s.firstError ?? '-'}\n`);
          }
        }
        throw error;
      }
      for (const s of statuses)
        io.stdout(`${s.url}\thealthy after ${(s.healthyAfterMs! / 1000).toFixed(1)}s\n`);
      return EXIT.ok;
    }
  }
  return EXIT.usage;
}

function help(command: string, io: CliIo): number {
  io.stdout(`${HELP[command]}\n`);
  return EXIT.ok;
}

/** Run the CLI; never throws. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  try {
    return await run(argv, io);
  } catch (error) {
    if (io.signal?.aborted) {
      io.stderr('interrupted\n');
      return EXIT.interrupted;
    }
    if (error instanceof RayJobFailedError) {
      io.stderr(`${error.message}\n`);
      return EXIT.failed;
    }
    if (VimeError.isInstance(error)) {
      io.stderr(`vime: ${error.message}\n`);
      return error.code === 'invalid_config' || error.code === 'validation_error' ? EXIT.usage : EXIT.failed;
    }
    io.stderr(`vime: ${(error as Error).stack ?? String(error)}\n`);
    return EXIT.failed;
  }
}
