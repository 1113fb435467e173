/**
 * The agent's change, captured as a binary git diff against the snapshot of its start state, with the
 * snapshot's private git dir and index: the agent's HEAD, index and `.git` (hooks, `info/exclude`, config)
 * play no part and are left as they were. Ignored files stay behind (the repository's `.gitignore` rules
 * apply), and the patch is the only thing that leaves the agent's sandbox.
 */
import { shellQuote } from '@vime/core/utils';
import { diffHeaderPath } from './diff-header.js';
import { sh } from './git.js';
import { type SweSession, snapshotGit } from './setup.js';

/** Largest patch captured (default 16 MiB); a larger one is the agent's failure, not a partial patch. */
export const MAX_PATCH_BYTES = 16 << 20;

/**
 * The agent's change captured as a patch, with the files it changed, deleted and the test files it touched.
 */
export interface CapturedPatch {
  /** The change, test files excluded (they are restored before grading), binary files as git binary diffs. */
  patch: string;
  /** Every path the agent added, changed or deleted (test files included). */
  changedFiles: string[];
  /** Paths deleted by the agent. */
  deletedFiles: string[];
  /** F2P/P2P test files the agent touched: P2P edits and deletions count as a hack; F2P paths are discarded. */
  changedTestFiles: string[];
}

/** Why a capture produced no patch. The sandbox answered, so this is the agent's doing (reward 0). */
export interface CaptureFailure {
  failed: true;
  reason: 'patch_too_large' | 'repository_broken';
  message: string;
}

/**
 * Capture the agent's work. A sandbox that does not answer throws (an infrastructure failure); one that
 * answers but cannot produce a patch (its snapshot removed, the work dir made unreadable, a patch over
 * `maxBytes`) returns a `CaptureFailure`, which grades as 0.
 */
export async function captureAgentPatch(
  session: SweSession,
  options: {
    signal?: AbortSignal | undefined;
    maxBytes?: number | undefined;
    timeoutMs?: number | undefined;
  } = {},
): Promise<CapturedPatch | CaptureFailure> {
  const { sandbox, startTree, testFiles } = session;
  const { signal, maxBytes = MAX_PATCH_BYTES, timeoutMs = 120_000 } = options;
  const tests = new Set([...testFiles.failToPass, ...testFiles.passToPass]);
  const list = await sh(
    sandbox,
    `${snapshotGit('add -A')} && ${snapshotGit(`diff --cached --name-status --no-renames -z ${startTree}`)}`,
    { signal, timeoutMs, maxOutputBytes: maxBytes },
  );
  if (list.exitCode !== 0 || list.timedOut || list.truncated) {
    return broken(list.truncated ? 'the list of changed files is too large' : list.output);
  }
  const fields = list.stdout.split('\0').filter(Boolean);
  const changedFiles: string[] = [];
  const deletedFiles: string[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    changedFiles.push(fields[i + 1]!);
    if (fields[i] === 'D') deletedFiles.push(fields[i + 1]!);
  }
  const changedTestFiles = changedFiles.filter((f) => tests.has(f));
  const excludes = [...tests].map((f) => shellQuote(`:(exclude,literal)${f}`)).join(' ');
  const diff = await sh(
    sandbox,
    snapshotGit(
      `diff --cached --binary --full-index --no-color --no-ext-diff --no-renames ${startTree} -- . ${excludes}`,
    ),
    { signal, timeoutMs, maxOutputBytes: maxBytes },
  );
  if (diff.truncated || Buffer.byteLength(diff.stdout) > maxBytes) {
    return {
      failed: true,
      reason: 'patch_too_large',
      message: `the agent's patch is larger than ${maxBytes} bytes`,
    };
  }
  if (diff.exitCode !== 0 || diff.timedOut) return broken(diff.output);
  return { patch: diff.stdout, changedFiles, deletedFiles, changedTestFiles };
}

function broken(output: string): CaptureFailure {
  return {
    failed: true,
    reason: 'repository_broken',
    message: `the agent's work dir could not be diffed against its start: ${output.trim().slice(-600)}`,
  };
}

/** A change set from a patch made elsewhere (e.g. the gold patch): the paths its headers name. */
export function patchFromDiff(patch: string, testFiles: Iterable<string> = []): CapturedPatch {
  const changed = new Set<string>();
  const deleted = new Set<string>();
  let current: string | undefined;
  for (const line of patch.split('\n')) {
    const header = diffHeaderPath(line);
    if (header !== undefined) {
      current = header;
      changed.add(current);
    } else if (current && line.startsWith('deleted file mode')) deleted.add(current);
  }
  const tests = new Set(testFiles);
  return {
    patch,
    changedFiles: [...changed],
    deletedFiles: [...deleted],
    changedTestFiles: [...changed].filter((f) => tests.has(f)),
  };
}
