/** `vime ray submit|status|logs|stop`: Ray Jobs over the dashboard's REST API. */
import { ConfigError } from '@vime/core';
import {
  type CliIo,
  type Command,
  EXIT,
  httpUrl,
  parseFlags,
  readTextFile,
  shellJoin,
} from '@vime/core/utils';
import { RayJobsClient } from '../../ray/client.js';
import { redactRequest, slimeJobRequest } from '../../ray/job.js';
import { type FlagValues, PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';

const RAY_OPTIONS = {
  ...PLAN_OPTIONS,
  address: { type: 'string' },
  'token-file': { type: 'string' },
} as const;
const RAY_HELP = `Ray options:
  --address URL       dashboard URL (default: config ray.address, $RAY_ADDRESS, http://127.0.0.1:8265)
  --token-file FILE   token for RAY_AUTH_MODE=token clusters (default: $RAY_AUTH_TOKEN)`;

/** Run `fn` with a client for the dashboard the flags name, and close its connection pool after. */
async function withRayClient<T>(
  values: FlagValues,
  io: CliIo,
  fn: (client: RayJobsClient) => Promise<T>,
): Promise<T> {
  let token = io.env.RAY_AUTH_TOKEN;
  const tokenFile = values['token-file'] as string | undefined;
  if (tokenFile !== undefined) {
    token = (await readTextFile(tokenFile, '--token-file', { cwd: io.cwd })).trim();
    if (!token)
      throw new ConfigError(
        `--token-file ${tokenFile} is empty; put the cluster's token in it (\`ray get-auth-token\`)`,
      );
  }
  let address: string;
  if (values.address !== undefined)
    address = httpUrl(values.address as string, '--address', 'http://HOST:8265').href;
  else if (values.config) address = (await planFrom(values, io)).config.ray.address;
  else if (io.env.RAY_ADDRESS) address = httpUrl(io.env.RAY_ADDRESS, 'RAY_ADDRESS', 'http://HOST:8265').href;
  else address = 'http://127.0.0.1:8265';
  const client = new RayJobsClient({ address, token });
  try {
    return await fn(client);
  } finally {
    // The client keeps connections alive; left open they hold the process for seconds after the answer.
    await client.close();
  }
}

const signalOf = (io: CliIo) => (io.signal ? { signal: io.signal } : {});

export const raySubmitCommand: Command = {
  name: 'ray submit',
  synopsis: 'ray submit [-- CMD...]',
  summary: "submit the plan's slime command (or CMD) as a Ray job",
  help: `Usage: vime ray submit [options] [--submission-id ID] [--no-wait] [-- CMD...]

Submit CMD, or the plan's slime command, as a Ray job. The submission id is the idempotency key: submitting
the same id again returns the existing job and never starts a second run. Without --no-wait, follows the log
and exits 0 when the job SUCCEEDED, 1 when it FAILED or was STOPPED (with the last log lines on stderr).

  --submission-id ID   idempotency key (default: generated)
  --no-wait            print the submission id and return
  --dry-run            print the request (secrets redacted) without sending it

${RAY_HELP}

${PLAN_HELP}`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime ray submit', args, {
      ...RAY_OPTIONS,
      'submission-id': { type: 'string' },
      'no-wait': { type: 'boolean' },
      'dry-run': { type: 'boolean' },
    });
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
    return withRayClient(values, io, async (client) => {
      client.on('retry', (r) =>
        io.stderr(`ray: submission rejected (${r.reason}); retry ${r.attempt} in ${r.delayMs / 1000}s\n`),
      );
      const { submissionId, existing } = await client.submit(request, signalOf(io));
      io.stderr(`${existing ? 'already submitted' : 'submitted'}: ${submissionId}\n`);
      if (values['no-wait']) {
        io.stdout(`${submissionId}\n`);
        return EXIT.ok;
      }
      for await (const chunk of client.tail(submissionId, signalOf(io))) io.stdout(chunk);
      await client.wait(submissionId, signalOf(io));
      return EXIT.ok;
    });
  },
};

export const rayStatusCommand: Command = {
  name: 'ray status',
  synopsis: 'ray status [ID]',
  summary: 'show a job (or list all jobs)',
  help: `Usage: vime ray status [ID] [--json]\n\nShow one job's status, or list all jobs.\n\n${RAY_HELP}`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime ray status', args, {
      ...RAY_OPTIONS,
      json: { type: 'boolean' },
    });
    const jobs = await withRayClient(values, io, (client) =>
      positionals.length
        ? Promise.all(positionals.map((id) => client.get(id, signalOf(io))))
        : client.list(signalOf(io)),
    );
    if (values.json) io.stdout(`${JSON.stringify(positionals.length === 1 ? jobs[0] : jobs, null, 2)}\n`);
    else {
      for (const job of jobs) {
        const id = job.submission_id ?? job.job_id ?? '?';
        io.stdout(`${id}\t${job.status}\t${job.type}\t${(job.message ?? '').split('\n')[0]}\n`);
      }
    }
    return EXIT.ok;
  },
};

export const rayLogsCommand: Command = {
  name: 'ray logs',
  synopsis: 'ray logs ID',
  summary: "print a job's log (--follow to keep reading)",
  help: `Usage: vime ray logs ID [--follow]\n\nPrint a job's log; --follow keeps polling until the job ends.\n\n${RAY_HELP}`,
  async run(args, io) {
    const { values, positionals } = parseFlags(
      'vime ray logs',
      args,
      { ...RAY_OPTIONS, follow: { type: 'boolean', short: 'f' } },
      { maxPositionals: 1 },
    );
    const [id] = positionals;
    if (!id) throw new ConfigError('name the job: vime ray logs ID');
    await withRayClient(values, io, async (client) => {
      if (values.follow) {
        for await (const chunk of client.tail(id, signalOf(io))) io.stdout(chunk);
      } else {
        io.stdout(await client.logs(id, signalOf(io)));
      }
    });
    return EXIT.ok;
  },
};

export const rayStopCommand: Command = {
  name: 'ray stop',
  synopsis: 'ray stop ID',
  summary: 'stop a job',
  help: `Usage: vime ray stop ID\n\nStop a running job (prints whether it was running).\n\n${RAY_HELP}`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime ray stop', args, RAY_OPTIONS, { maxPositionals: 1 });
    const [id] = positionals;
    if (!id) throw new ConfigError('name the job: vime ray stop ID');
    const stopped = await withRayClient(values, io, (client) => client.stop(id, signalOf(io)));
    io.stdout(stopped ? `stopping ${id}\n` : `${id} had already ended\n`);
    return EXIT.ok;
  },
};
