/**
 * What a `GroupQueue` keeps, and branches. GC forgets the groups and steps nothing can ask for again
 * (handed before every checkpoint and the trainer's step, less `retainSteps`; dropped ones), writes the
 * state snapshot, then deletes the segments no remaining group points into. A fork hard-links the
 * parent's sealed segments: each directory deletes only its own links, so a segment's data goes only
 * once no branch needs it.
 */
import { copyFile, link, mkdir, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, describeValue } from '../errors.js';
import { syncDir } from '../utils/files.js';
import { listSegments } from './files.js';
import { QueueError, segmentName } from './format.js';
import { cutAt, horizonOf, pruneState, refsOf } from './group-state.js';
import type { GcReport } from './group-types.js';
import { cloneState, type Journal, STATE_FILE, writeStateFile } from './journal.js';

export async function collectGarbage(
  journal: Journal,
  retainSteps: number,
  pruned: (groups: number[]) => void,
): Promise<GcReport> {
  const state = journal.state;
  const horizon = horizonOf(state, retainSteps);
  const before = { ...state.collected };
  pruned(pruneState(state, horizon));
  const needed = new Set(refsOf(state, horizon).map((ref) => ref[0]));
  const bases = await listSegments(journal.dir);
  // Segments whose every record is on disk, that no group points into, and are not written to.
  const unneeded = (upTo: number) =>
    bases.filter((base, i) => {
      const next = bases[i + 1];
      return next !== undefined && next - 1 <= upTo && !needed.has(base) && base !== journal.writableSegment;
    });
  const doomed: number[] = [];
  // The snapshot (a full write and flush) only when it lets a segment go: opening then replays from it.
  if (unneeded(journal.durable).length > 0) doomed.push(...unneeded(await journal.snapshot()));
  await journal.deleteSegments(doomed);
  let bytes = 0;
  const kept = bases.filter((b) => !doomed.includes(b));
  for (const base of kept) {
    bytes += await stat(join(journal.dir, segmentName(base))).then(
      (s) => s.size,
      () => 0,
    );
  }
  return {
    deleted: doomed.map(segmentName),
    segments: kept.length,
    bytes,
    collected: {
      groups: state.collected.groups - before.groups,
      steps: state.collected.steps - before.steps,
    },
  };
}

/**
 * Start a branch in `dir` at `fromStep`: the parent's state with the steps after `fromStep` undone
 * (their groups are complete again, to be handed off in the branch's own steps), the trainer at the
 * checkpoint's step and version, and every segment shared by a hard link (copied across devices).
 */
export async function forkBranch(
  journal: Journal,
  parentDir: string,
  dir: string,
  fromStep: number,
): Promise<void> {
  const state = journal.state;
  const trainer = state.trainer;
  const at = fromStep === trainer.step ? trainer : state.checkpoints.get(fromStep);
  if (!Number.isInteger(fromStep) || !at) {
    const steps = [...state.checkpoints.keys()].sort((a, b) => a - b);
    throw new ConfigError(
      `GroupQueue.fork fromStep: expected a checkpointed step (${steps.join(', ') || 'none'}) or the trainer's step ${trainer.step}, found ${describeValue(fromStep)}`,
    );
  }
  if (typeof dir !== 'string' || dir === '') {
    throw new ConfigError(`GroupQueue.fork dir: expected a directory path, found ${describeValue(dir)}`);
  }
  await mkdir(dir, { recursive: true });
  const present = await readdir(dir);
  if (present.length > 0) {
    throw new ConfigError(
      `GroupQueue.fork dir: ${dir} is not empty (${present.slice(0, 3).join(', ')}…); fork into a new directory`,
    );
  }
  // Seal, then copy the state in the same tick as checking that nothing was appended since: every
  // record it covers is then in a sealed segment, which no one writes again.
  for (;;) {
    await journal.seal();
    if (journal.writableSegment === undefined && journal.durable === state.seq) break;
  }
  const branch = cloneState(state);
  cutAt(branch, fromStep);
  branch.trainer = { step: at.step, version: at.version };
  branch.branch = { parent: parentDir, fromStep, at: Date.now() };
  for (const base of await listSegments(journal.dir)) {
    if (base > branch.seq) continue; // started after the cut
    const from = join(journal.dir, segmentName(base));
    const to = join(dir, segmentName(base));
    await link(from, to).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EXDEV' && error.code !== 'EPERM') {
        throw new QueueError(`GroupQueue.fork: linking ${from} to ${to}: ${error.message}`, { cause: error });
      }
      await copyFile(from, to);
    });
  }
  await writeStateFile(join(dir, STATE_FILE), branch);
  await syncDir(dir);
}
