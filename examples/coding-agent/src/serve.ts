/**
 * The coding-agent rollout behind slime: a Vime rollout server (examples/slime-bridge) whose every
 * request is one slime sample carrying a SWE-smith row in its `metadata`. Each request runs one
 * coding-agent rollout against the given engines and answers with the rollout's training rows.
 * An infrastructure failure answers the sample back as `failed` with `remove_sample: true` and no
 * reward, so it is dropped from training instead of entering GRPO as a 0.
 *
 *   node --import tsx --conditions=@vime/source examples/coding-agent/src/serve.ts \
 *     --engine-url http://sglang-0.$SKYPILOT_JOBGROUP_NAME:30000 [--engine-url ...] [--port 8600] [--host 0.0.0.0]
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  createSample,
  loadTokenizer,
  type Sample,
  sglangEngine,
  startCaptureProxy,
  type TaskSpec,
  VimeError,
} from '@vime/core';
import { startRolloutServer } from '@vime/launch';
import { bubblewrapProvider, dockerProvider, WarmPool } from '@vime/sandbox';
import { buildOfflineTaskSet, offlineProfile, rowToTask, SweSmithRowSchema } from '@vime/swe';
import { ConfigSchema } from './config.js';
import { bundledTokenizerDir } from './loop.js';
import { codingAgentRollout } from './rollout.js';

const { values } = parseArgs({
  options: {
    'engine-url': { type: 'string', multiple: true },
    tokenizer: { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string' },
    concurrency: { type: 'string' },
    sandbox: { type: 'string' },
    'warm-sandboxes': { type: 'string' },
  },
});
const urls = values['engine-url'] ?? (process.env.VIME_ENGINE_URLS ?? '').split(/\s+/).filter(Boolean);
if (urls.length === 0) {
  console.error('give the engines with --engine-url URL (repeatable) or VIME_ENGINE_URLS="url1 url2"');
  process.exit(2);
}
const config = ConfigSchema.parse({
  engineUrls: urls,
  sandbox: values.sandbox ?? 'docker',
  concurrency: Number(values.concurrency ?? 64),
  warmSandboxes: Number(values['warm-sandboxes'] ?? 0),
});
const tokenizer = await loadTokenizer(values.tokenizer ?? bundledTokenizerDir());
const proxy = await startCaptureProxy({ engine: urls.map((u) => sglangEngine(u)), tokenizer });
const provider = config.sandbox === 'docker' ? dockerProvider() : bubblewrapProvider();
const pool = new WarmPool(provider, {
  spec: { workdir: '/testbed' },
  size: config.warmSandboxes,
  maxLive: config.concurrency + config.warmSandboxes,
});

// Rows of the offline task set need its repository bundle staged; SWE-smith rows have theirs in the image.
let offline: Promise<Map<string, TaskSpec>> | undefined;
async function taskOf(metadata: Record<string, unknown>): Promise<TaskSpec> {
  const row = SweSmithRowSchema.parse(metadata);
  if (!row.repo.includes(offlineProfile().key)) return rowToTask(row);
  offline ??= buildOfflineTaskSet({ dir: join('runs', '.cache', 'offline-tasks') }).then(
    (set) => new Map(set.tasks.map((t) => [t.id, t])),
  );
  const task = (await offline).get(row.instance_id);
  if (!task) throw new VimeError('invalid_argument', `unknown offline instance ${row.instance_id}`);
  return task;
}

const server = await startRolloutServer({
  host: values.host ?? '0.0.0.0',
  port: Number(values.port ?? 8600),
  concurrency: config.concurrency,
  deadlineMs: config.rolloutGuardMs,
  rollout: async ({ sample, samplingParams, signal }): Promise<Sample[]> => {
    const task = await taskOf(sample.metadata);
    const sampling = {
      ...config,
      temperature: Number(samplingParams.temperature ?? config.temperature),
      topP: Number(samplingParams.top_p ?? config.topP),
      maxTokensPerTurn: Number(samplingParams.max_new_tokens ?? config.maxTokensPerTurn),
    };
    const rollout = codingAgentRollout({ config: sampling, proxy, pool, model: 'policy' });
    const ids = {
      group_index: sample.group_index,
      index: sample.index,
      rollout_id: sample.rollout_id ?? sample.index,
    };
    try {
      const outcome = await rollout(task, {
        taskId: task.id,
        groupIndex: sample.group_index ?? 0,
        sampleIndex: sample.index ?? 0,
        rolloutId: ids.rollout_id ?? 0,
        signal,
        emit: () => {},
        phase: async (_phase, fn) => fn(),
      });
      return (outcome.samples ?? []).map((row) =>
        createSample({
          ...row,
          ...ids,
          prompt: sample.prompt,
          label: sample.label,
          metadata: { ...sample.metadata, ...row.metadata },
        }),
      );
    } catch (error) {
      if (signal.aborted) throw error;
      const code = VimeError.isInstance(error) ? error.code : 'rollout_error';
      return [
        createSample({
          ...sample,
          ...ids,
          status: 'failed',
          remove_sample: true,
          reward: null,
          metadata: { ...sample.metadata, vime_error: { code, message: (error as Error).message } },
        }),
      ];
    }
  },
});
console.log(`coding-agent rollout server on ${server.url} (engines: ${urls.join(', ')})`);
const stop = async () => {
  await server.close();
  await pool.close();
  await proxy.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
