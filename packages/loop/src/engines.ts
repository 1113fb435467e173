/**
 * The run's inference engines: the given SGLang/vLLM URLs (waited for until healthy, bounded), or
 * stand-in engines serving the scripted coding policy (labelled as a stand-in everywhere it shows).
 */
import { ConfigError, type TaskSpec } from '@vime/core';
import {
  type ChatTokenizer,
  checkEngineTokenizer,
  type Engine,
  type RoutingShape,
  sglangEngine,
  vllmEngine,
  waitForEngines,
} from '@vime/core/engine';
import { type CaptureProxy, startCaptureProxy } from '@vime/core/proxy';
import {
  type StandInEngine,
  type StandInPolicy,
  type StandInRouting,
  startStandInEngine,
} from '@vime/core/standin';

import type { Config } from './config/schema.js';
import { debuggerPolicy } from './standin/debugger.js';
import { codingAgentPolicy } from './standin/policy.js';

/** The run's engines: real or stand-in, their URLs and their logs. */
export interface RunEngines {
  engines: Engine[];
  urls: string[];
  standIns: StandInEngine[];
  /** Decode-batch log lines of each stand-in engine, for the report. */
  logs: string[][];
  /** Close the engines' connections and stop the stand-ins. */
  close(): Promise<void>;
}

/** Wait for the given engines, or start stand-in engines serving the scripted coding policy. */
export async function startEngines(
  config: Config,
  tasks: readonly TaskSpec[],
  tokenizer: ChatTokenizer,
  log: (line: string) => void,
  signal?: AbortSignal,
  /** The stand-ins' answers (default: the scripted coding policy, which speaks mini-swe-agent's protocol). */
  standInPolicy?: StandInPolicy | undefined,
): Promise<RunEngines> {
  if (config.engineUrls.length > 0) {
    log(
      `waiting up to ${Math.round(config.engineWaitMs / 1000)} s for ${config.engineUrls.length} engine(s) to be healthy`,
    );
    try {
      await waitForEngines(config.engineUrls, {
        deadline: config.engineWaitMs,
        kind: config.engineKind,
        stableChecks: 1,
        signal,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new ConfigError(
        `--engine-url: ${(error as Error).message}. Start the engine(s), fix the URL, or raise --engine-wait`,
        { cause: error },
      );
    }
    await checkTokenizer(config, tokenizer, log, signal);
    const engines = config.engineUrls.map((url) =>
      config.engineKind === 'vllm'
        ? vllmEngine(url, { maxLogprobs: config.engineMaxLogprobs })
        : sglangEngine(url),
    );
    return {
      engines,
      urls: config.engineUrls,
      standIns: [],
      logs: [],
      close: async () => {
        await Promise.all(engines.map((e) => e.close()));
      },
    };
  }
  const policy = standInPolicy ?? codingPolicy(config, tasks);
  const standIns: StandInEngine[] = [];
  const logs: string[][] = [];
  for (let i = 0; i < config.standInEngines; i++) {
    const engine = await startStandInEngine({
      tokenizer,
      policy,
      service: {
        slots: config.standInSlots,
        tokensPerSecond: config.standInTokensPerSecond,
        kvTokens: 262_144,
      },
      decodeLogIntervalMs: 250,
      logTag: 'TP0',
      specVerifyPasses: specVerifyPasses(config.standInSpecAcceptLength),
      routedExperts: standInRouting(config),
    });
    const lines: string[] = [];
    engine.events.on('log', (line) => lines.push(line));
    logs.push(lines);
    standIns.push(engine);
  }
  // The stand-in serves both wires; the proxy speaks the one the config names.
  const engines = standIns.map((e) =>
    config.engineKind === 'vllm' ? vllmEngine(e.url) : sglangEngine(e.url),
  );
  return {
    engines,
    urls: standIns.map((e) => e.url),
    standIns,
    logs,
    close: async () => {
      await Promise.all(engines.map((e) => e.close()));
      await Promise.all(standIns.map((e) => e.close()));
    },
  };
}

/** The run's MoE routing replay (R3): both knobs or neither. */
export function routingReplayOf(config: Config): RoutingShape | undefined {
  const { routingReplayLayers: layers, routingReplayTopK: topK } = config;
  if (layers === null && topK === null) return undefined;
  if (layers === null || topK === null) {
    throw new ConfigError(
      `routing replay needs both engines.routing_replay.layers and engines.routing_replay.top_k (--routing-replay-layers, --routing-replay-top-k), found layers ${layers} and top_k ${topK}`,
    );
  }
  return { layers, topK };
}

/** The stand-in engines' made-up MoE routing when the run replays routing (a scripted figure, not a model's). */
function standInRouting(config: Config): StandInRouting | undefined {
  const shape = routingReplayOf(config);
  return shape && { ...shape, experts: Math.max(8, shape.topK * 4) };
}

/** Simulated speculation: the verification passes an answer of n tokens reports at this acceptance length. */
function specVerifyPasses(acceptLength: number | null) {
  if (acceptLength === null) return undefined;
  return ({ outputTokens }: { outputTokens: number }) => Math.ceil(outputTokens / acceptLength);
}

/**
 * Every engine reads token ids with the run's tokenizer, or the run stops here, before any sandbox or
 * rollout: a mismatch would corrupt every sample without an error. Without `--tokenizer` the bundled
 * Qwen3 tokenizer is used only when every engine is found to match it.
 */
async function checkTokenizer(
  config: Config,
  tokenizer: ChatTokenizer,
  log: (line: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const name = config.tokenizer ?? 'the bundled Qwen3 tokenizer';
  const checks = await Promise.all(
    config.engineUrls.map(async (url) => ({
      url,
      check: await checkEngineTokenizer(url, tokenizer, { kind: config.engineKind, signal }),
    })),
  );
  for (const { url, check } of checks) {
    const serves = check.model ? ` (it serves ${check.model})` : '';
    const fix = check.model
      ? `give --tokenizer the folder of the model the engine serves (${check.model})`
      : 'give --tokenizer the folder of the model the engine serves';
    if (check.status === 'mismatch')
      throw new ConfigError(
        `--tokenizer: the engine at ${url}${serves} does not tokenize like ${name}: ${check.differences.join('; ')}. Every sample would be corrupt; ${fix}`,
      );
    if (check.status === 'unchecked') {
      if (config.tokenizer === undefined)
        throw new ConfigError(
          `--tokenizer is required with --engine-url: the bundled Qwen3 tokenizer cannot be checked against ${url}${serves} (${check.reason}); ${fix}`,
        );
      log(`tokenizer: not checked against ${url} (${check.reason}); using ${name} as given`);
      continue;
    }
    log(
      `tokenizer: ${name} matches the engine at ${url}${serves} (${check.probeTokens} probe tokens through ${check.via === 'tokenize' ? '/tokenize and /detokenize' : 'a probe /generate'})`,
    );
  }
}

/** The capture proxy in front of the run's engines, with the run's router settings. */
export function startRunProxy(
  config: Config,
  engines: RunEngines,
  tokenizer: ChatTokenizer,
  socketPath: string | undefined,
): Promise<CaptureProxy> {
  return startCaptureProxy({
    engine: engines.engines,
    tokenizer,
    socketPath,
    onWeightUpdate: config.onWeightUpdate,
    routingReplay: routingReplayOf(config),
    router: {
      healthIntervalMs: config.engineHealthIntervalMs,
      unavailableDeadlineMs: config.engineDeadlineMs,
    },
  });
}

/**
 * The bundled stand-in policy, in mini-swe-agent's protocol: the scripted coding agent with the run's odds,
 * or the scripted debugger (`engines.stand_in.policy: debugger`), which reads only the conversation.
 */
function codingPolicy(config: Config, tasks: readonly TaskSpec[]): StandInPolicy {
  if (config.standInPolicy === 'debugger') {
    const debug = debuggerPolicy();
    return (request) => debug(request.prompt);
  }
  const policy = codingAgentPolicy(
    tasks.map((t) => ({ problemStatement: t.prompt, goldPatch: t.goldPatch ?? '', workdir: t.workdir })),
    { odds: config.odds, seed: config.seed },
  );
  return (request) => policy(request.prompt);
}
