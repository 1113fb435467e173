/**
 * The token audit's share of a step's hand-off. A step of coding-agent rollouts is built by the trajectory
 * manager from recorded turns (with top-p replay data and a weight update inside one turn per session);
 * the loop's hand-off without a trainer is then timed piece by piece in the same run: reading the rows
 * back (the queue's take), GRPO advantages, the audit against the captured turns, encoding the batch and
 * writing it atomically. The target: the audit costs under 5% of the hand-off.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples, encodeSamples, type ScoredRollout, type Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { writeFileAtomic } from '@vime/core/utils';
import { type AuditTurn, auditHandoff, auditTurnOf, grpoAdvantages } from '@vime/grpo';
import { type Bench, fmt, type Table } from './harness.js';

const ROLLOUTS = 32;
const TURNS = 12;
const OUTPUT = 512;
const OBSERVATION = 256;
const PROMPT = 2048;
const KEPT = 3;

/** One session's turns: each prompt extends the last by its output and an observation. */
function sessionTurns(seed: number): Array<Omit<Turn, 'index'>> {
  let s = seed;
  const rand = () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  const id = () => Math.floor(rand() * 150_000);
  let prompt = Array.from({ length: PROMPT }, id);
  return Array.from({ length: TURNS }, (_, k) => {
    const output = Array.from({ length: OUTPUT }, id);
    const offsets = Int32Array.from({ length: OUTPUT + 1 }, (_, i) => i * KEPT);
    const turn: Omit<Turn, 'index'> = {
      promptIds: Int32Array.from(prompt),
      outputIds: Int32Array.from(output),
      logprobs: Float32Array.from(output, () => Math.log(rand())),
      finishReason: 'tool_calls',
      policyVersion: k < TURNS / 2 ? '3' : '4',
      ...(k === TURNS / 2
        ? {
            versionRuns: [
              { version: '3', tokens: OUTPUT / 2 },
              { version: '4', tokens: OUTPUT / 2 },
            ],
          }
        : {}),
      topP: {
        ids: Int32Array.from({ length: OUTPUT * KEPT }, id),
        offsets,
        logprobs: Float32Array.from({ length: OUTPUT * KEPT }, () => Math.log(rand())),
      },
      startedAt: 0,
      endedAt: 1,
    };
    prompt = [...prompt, ...output, ...Array.from({ length: OBSERVATION }, id)];
    return turn;
  });
}

/** The step's rollouts and the turns the proxy captured for them. */
function step(): { rollouts: ScoredRollout[]; turns: Map<string, AuditTurn[]> } {
  const m = new TrajectoryManager();
  const turns = new Map<string, AuditTurn[]>();
  m.on('turn', (e) =>
    turns.set(e.sessionId, [
      ...(turns.get(e.sessionId) ?? []),
      auditTurnOf(e.sessionId, e.turn, turns.get(e.sessionId)?.at(-1)),
    ]),
  );
  const rollouts = Array.from({ length: ROLLOUTS }, (_, r): ScoredRollout => {
    const id = `s${r}`;
    for (const t of sessionTurns(r + 1)) m.record(id, t);
    const reward = r % 3 === 0 ? 1 : 0;
    return {
      taskId: `t${r >> 2}`,
      groupIndex: r >> 2,
      sampleIndex: r & 3,
      rolloutId: r,
      sessionId: id,
      samples: m.finish(id, { reward }),
      turns: TURNS,
      timings: {},
      metadata: {},
      status: 'completed',
      reward,
    };
  });
  return { rollouts, turns };
}

export default {
  name: 'handoff-audit',
  description: `the token audit's share of a step's hand-off (${ROLLOUTS} rollouts × ${TURNS} turns × ${OUTPUT} sampled tokens, top-p replay)`,
  async run(): Promise<Table[]> {
    const { rollouts, turns } = step();
    const turnsOf = (ids: readonly string[]) => ids.flatMap((id) => turns.get(id) ?? []);
    const queued = encodeSamples(rollouts.flatMap((r) => r.samples));
    const dir = mkdtempSync(join(tmpdir(), 'vime-bench-handoff-'));
    try {
      // Each iteration runs the whole hand-off and times its pieces, so a load change on a shared machine
      // hits every piece of that iteration alike; the share is the median of the per-iteration shares.
      const rows = rollouts.flatMap((r) => r.samples);
      const pieces = {
        take: [] as number[],
        advantages: [] as number[],
        audit: [] as number[],
        encode: [] as number[],
        write: [] as number[],
      };
      const shares: number[] = [];
      let failed = -1;
      let bytes: Uint8Array = new Uint8Array();
      for (let it = 0; it < 18; it++) {
        const t0 = performance.now();
        decodeSamples(queued);
        const t1 = performance.now();
        grpoAdvantages(
          rollouts.map((r) => r.reward),
          { groups: rollouts.map((r) => r.groupIndex), preset: 'slime' },
        );
        const t2 = performance.now();
        failed = auditHandoff(rollouts, turnsOf).failed.length;
        const t3 = performance.now();
        bytes = encodeSamples(rows);
        const t4 = performance.now();
        await writeFileAtomic(join(dir, 'step.msgpack'), bytes);
        const t5 = performance.now();
        if (it < 3) continue; // warm-up
        pieces.take.push(t1 - t0);
        pieces.advantages.push(t2 - t1);
        pieces.audit.push(t3 - t2);
        pieces.encode.push(t4 - t3);
        pieces.write.push(t5 - t4);
        shares.push((t3 - t2) / (t5 - t0));
      }
      const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
      const take = { median: median(pieces.take) };
      const advantages = { median: median(pieces.advantages) };
      const audit = { median: median(pieces.audit) };
      const encode = { median: median(pieces.encode) };
      const write = { median: median(pieces.write) };
      const total = take.median + advantages.median + audit.median + encode.median + write.median;
      const share = median(shares);
      const perSample = (audit.median * 1000) / rows.length;
      const sampled = ROLLOUTS * TURNS * OUTPUT;
      return [
        {
          title: `hand-off of one step: ${rows.length} samples, ${sampled.toLocaleString('en')} sampled tokens, ${fmt.bytes(bytes.length)} batch`,
          columns: ['piece', 'median', 'share of hand-off'],
          rows: [
            [
              'read the rows back (queue take: decode)',
              fmt.ms(take.median),
              `${((take.median / total) * 100).toFixed(1)}%`,
            ],
            [
              'GRPO advantages',
              fmt.ms(advantages.median),
              `${((advantages.median / total) * 100).toFixed(1)}%`,
            ],
            [
              'token audit (every sample vs its captured turns)',
              fmt.ms(audit.median),
              `${(share * 100).toFixed(1)}%`,
            ],
            [
              'encode the batch (msgpack)',
              fmt.ms(encode.median),
              `${((encode.median / total) * 100).toFixed(1)}%`,
            ],
            ['write it atomically', fmt.ms(write.median), `${((write.median / total) * 100).toFixed(1)}%`],
            ['hand-off (sum of medians)', fmt.ms(total), '100%'],
          ],
          checks: [
            {
              target: 'the audit passes every untampered rollout',
              measured: `${failed} failed`,
              ok: failed === 0,
            },
            {
              target: 'the audit costs < 5% of the hand-off',
              measured: `${(share * 100).toFixed(2)}% (${perSample.toFixed(0)} µs per sample)`,
              ok: share < 0.05,
            },
          ],
          notes: [
            "Shares of the medians per piece; the checked share is the median over iterations of the audit over that iteration's whole hand-off.",
            'The trainer hook, the results file and the queue commit are not part of this hand-off (they would only shrink the share).',
            'The captured turns are kept as the loop keeps them in memory (the typed arrays of each turn, `auditTurnOf`).',
          ],
        },
      ];
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
} satisfies Bench;
