/**
 * Speculative decoding through a whole run, with the stand-in engine (a scripted policy, not a model)
 * simulating it (`standInSpecAcceptLength`: its answers carry SGLang's `spec_verify_ct`, a scripted figure):
 * the captured turns, the batch's rows, the step's `spec/*` scalars, the log and the report all show that
 * draft tokens were accepted, at the acceptance length the stand-in was given.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConfig } from '../config/resolve.js';
import { runLoop } from '../loop.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-spec-decode-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

const jsonLines = async (path: string) =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('speculative decoding in a run', () => {
  it('accepted draft tokens reach the turn log, the rows, the sinks, the log and the report', {
    timeout: 300_000,
  }, async () => {
    const out = join(tmp, 'run');
    const config = checkConfig({
      out,
      mode: 'sync',
      steps: 1,
      promptsPerStep: 2,
      samplesPerPrompt: 2,
      concurrency: 4,
      validate: false,
      quiet: true,
      poolReplicas: 2,
      standInSpecAcceptLength: 3,
    });
    const lines: string[] = [];
    await runLoop(config, { log: (line) => lines.push(line) });

    const turns = await jsonLines(join(out, 'turns.jsonl'));
    expect(turns.length).toBeGreaterThanOrEqual(4);
    for (const t of turns) {
      const output = (t.output_ids as number[]).length;
      expect(t.spec_verify_passes).toBe(Math.ceil(output / 3));
      expect(t.spec_accepted_tokens).toBe(output - Math.ceil(output / 3));
    }
    const passes = turns.reduce((s, t) => s + (t.spec_verify_passes as number), 0);
    const accepted = turns.reduce((s, t) => s + (t.spec_accepted_tokens as number), 0);
    expect(accepted).toBeGreaterThan(0);

    // Every row carries its rollout's sum; the step's scalars sum the rollouts.
    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    const sums = [...new Map(rows.map((r) => [r.rollout_id, r.metadata.spec_decode])).values()] as Array<{
      verify_passes: number;
      accepted_tokens: number;
    }>;
    expect(sums.every((s) => s.verify_passes > 0)).toBe(true);
    const rowPasses = sums.reduce((s, r) => s + r.verify_passes, 0);
    const rowAccepted = sums.reduce((s, r) => s + r.accepted_tokens, 0);
    expect(rowPasses).toBeLessThanOrEqual(passes);
    expect(rowAccepted).toBeLessThanOrEqual(accepted);

    const step = (await jsonLines(join(out, 'metrics.jsonl'))).filter((l) => l.kind === 'step').at(-1)!;
    expect(step.scalars).toMatchObject({
      'spec/accepted_tokens': rowAccepted,
      'spec/verify_passes': rowPasses,
      'spec/accept_length': 1 + rowAccepted / rowPasses,
    });
    expect(lines).toContainEqual(
      expect.stringMatching(/^step 1 speculative decoding: \d+ accepted draft tokens over \d+ verify passes/),
    );
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.spec_decode.total).toMatchObject({ acceptedTokens: rowAccepted, verifyPasses: rowPasses });
    expect(report.spec_decode.total.acceptLength).toBeGreaterThan(2);
    const html = await readFile(join(out, 'report.html'), 'utf8');
    expect(html).toContain('Speculation was on');
    expect(html).toContain('Stand-in engine: these are its scripted figures');
  });
});
