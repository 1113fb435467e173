/** `vime engines wait [URL...]`: gate on every inference engine being healthy. */
import { VimeError } from '@vime/core';
import { type EngineHealthStatus, waitForEngines } from '@vime/core/engine';
import { type Command, EXIT, httpUrl, oneOf, parseDuration, parseFlags, positiveInt } from '@vime/core/utils';
import { expandEnv } from '../../plan.js';
import { PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';

export const enginesWaitCommand: Command = {
  name: 'engines wait',
  synopsis: 'engines wait [URL...]',
  summary: 'wait until every inference engine is healthy',
  help: `Usage: vime engines wait [URL...] [--kind sglang|vllm] [--timeout 30m]

Poll each engine's health endpoint (SGLang /health_generate, vLLM /health) with backoff until every one is
healthy. Without URLs, waits for the plan's engines (<job>-0.$SKYPILOT_JOBGROUP_NAME:<port>). Exits 1 naming
the engines that never came up.

  --kind sglang|vllm   engine kind for health paths (default: the plan's)
  --timeout DURATION   overall deadline (default 30m)
  --stable N           consecutive healthy answers required (default 2)

${PLAN_HELP}`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime engines wait', args, {
      ...PLAN_OPTIONS,
      kind: { type: 'string' },
      timeout: { type: 'string' },
      stable: { type: 'string' },
    });
    const deadline = parseDuration(values.timeout ?? '30m', '--timeout');
    const stable = positiveInt(values.stable, '--stable');
    const plan = await planFrom(values, io);
    const kind = oneOf(values.kind, '--kind', ['sglang', 'vllm'] as const) ?? plan.jobGroup.engines.kind;
    const urls = positionals.length ? positionals : plan.engineUrls.map((u) => expandEnv(u, io.env));
    for (const url of urls) httpUrl(url, 'engine URL', 'http://HOST:PORT (e.g. http://127.0.0.1:30000)');
    io.stderr(`waiting for ${urls.length} engine(s): ${urls.join(' ')}\n`);
    let statuses: EngineHealthStatus[];
    try {
      statuses = await waitForEngines(urls, {
        deadline,
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
        for (const s of error.data.engines as EngineHealthStatus[]) {
          io.stdout(`${s.url}\t${s.state}\t${s.attempts} checks\tfirst error: ${s.firstError ?? '-'}\n`);
        }
      }
      throw error;
    }
    for (const s of statuses)
      io.stdout(`${s.url}\thealthy after ${(s.healthyAfterMs! / 1000).toFixed(1)}s\n`);
    return EXIT.ok;
  },
};
