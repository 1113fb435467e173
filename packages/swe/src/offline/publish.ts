/**
 * The offline task set as users get SWE-smith: the rows as JSONL and parquet, and the per-repo environment
 * (the repository mirror) listed in `environments.json` as a workspace template, or built into a Docker
 * image named as the rows' `image_name`.
 */

import { existsSync, lstatSync } from 'node:fs';
import {
  chmod,
  cp,
  mkdir,
  mkdtemp,
  readFile,
  readlink,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { SandboxError } from '@vime/core';
import { runProcessOk } from '@vime/core/utils';
import { type DockerEngine, HOST_USR_LABEL } from '@vime/sandbox';
import { parquetWriteBuffer } from 'hyparquet-writer';
import type { SweSmithRow } from '../dataset.js';
import { ENVIRONMENTS_FILE } from '../environment.js';

/** Where an image's workspace template lives inside the published folder. */
export function environmentFolder(image: string): string {
  return join('environments', image.replace(/[^A-Za-z0-9._-]+/g, '_'));
}

/** The upstream string columns, then the two list columns (the Hub's `list<string>`). */
const STRING_COLUMNS = [
  'instance_id',
  'repo',
  'patch',
  'image_name',
  'problem_statement',
  'base_commit',
  'created_at',
] as const;

/** Rows as a parquet file in the Hub's layout: the upstream string columns, the test lists as `list<string>`. */
export async function writeSweSmithParquet(path: string, rows: readonly SweSmithRow[]): Promise<void> {
  const parquet = parquetWriteBuffer({
    columnData: [
      ...STRING_COLUMNS.map((name) => ({
        name,
        data: rows.map((r) => r[name] ?? null),
        type: 'STRING' as const,
      })),
      { name: 'FAIL_TO_PASS', data: rows.map((r) => r.FAIL_TO_PASS) },
      { name: 'PASS_TO_PASS', data: rows.map((r) => r.PASS_TO_PASS) },
      // The generated sets' split column, only where rows have one.
      ...(rows.some((r) => r.split !== undefined)
        ? [{ name: 'split', data: rows.map((r) => r.split ?? null), type: 'STRING' as const }]
        : []),
    ],
  });
  await writeFile(path, new Uint8Array(parquet));
}

/** Move the built mirrors into place and write the rows and `environments.json` next to them. */
export async function publishDataset(
  dir: string,
  rows: readonly SweSmithRow[],
  mirrors: ReadonlyArray<{ image: string; repoDir: string }>,
): Promise<void> {
  const environments: Record<string, { template: string }> = {};
  for (const { image, repoDir } of mirrors) {
    const folder = environmentFolder(image);
    await mkdir(dirname(join(dir, folder)), { recursive: true });
    await rename(repoDir, join(dir, folder));
    environments[image] = { template: folder };
  }
  await writeJsonl(join(dir, 'instances.jsonl'), rows);
  await writeSweSmithParquet(join(dir, 'instances.parquet'), rows);
  await writeFile(join(dir, ENVIRONMENTS_FILE), `${JSON.stringify({ version: 1, environments }, null, 2)}\n`);
}

/** Rows as SWE-smith JSONL: one row per line. */
export async function writeJsonl(path: string, rows: readonly SweSmithRow[]): Promise<void> {
  await writeFile(path, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
}

/**
 * A Docker image holding the environment: the repository mirror at `/testbed` (owned by the sandbox user
 * 1000:1000) over a minimal skeleton labelled so that `dockerProvider` mounts the host's `/usr` read-only
 * (python3, pytest and git come from the host, as in the project's base image). Imported through the
 * Engine API (no registry, no build daemon features); with `ifMissing`, an image already there is kept.
 * Returns the image reference.
 */
export async function buildOfflineDockerImage(
  engine: DockerEngine,
  set: { image: string; repoDir: string },
  options: { signal?: AbortSignal | undefined; ifMissing?: boolean | undefined } = {},
): Promise<string> {
  if (options.ifMissing) {
    const found = await engine.request('GET', `/images/${encodeURIComponent(set.image)}/json`, {
      ok: [404],
      ...(options.signal ? { signal: options.signal } : {}),
    });
    if (found.status === 200) return set.image;
  }
  const work = await mkdtemp(join(tmpdir(), 'vime-offline-image-'));
  try {
    const root = join(work, 'root');
    for (const d of ['usr', 'etc', 'proc', 'sys', 'dev', 'tmp', 'root', 'sbin', 'home/sandbox', 'var/tmp']) {
      await mkdir(join(root, d), { recursive: true });
    }
    await chmod(join(root, 'tmp'), 0o1777);
    await chmod(join(root, 'var/tmp'), 0o1777);
    for (const link of ['bin', 'lib', 'lib32', 'lib64', 'libx32']) {
      if (existsSync(`/${link}`) && lstatSync(`/${link}`).isSymbolicLink()) {
        await symlink(await readlink(`/${link}`), join(root, link));
      }
    }
    await writeFile(
      join(root, 'etc/passwd'),
      'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n',
    );
    await writeFile(join(root, 'etc/group'), 'root:x:0:\nsandbox:x:1000:\n');
    await cp(set.repoDir, join(work, 'testbed'), { recursive: true });
    const tar = join(work, 'image.tar');
    await runProcessOk(
      'tar',
      ['-C', root, '--numeric-owner', '--owner=0', '--group=0', '--exclude=./home/sandbox', '-cf', tar, '.'],
      {
        cwd: work,
      },
    );
    await runProcessOk(
      'tar',
      ['-C', root, '--numeric-owner', '--owner=1000', '--group=1000', '-rf', tar, './home/sandbox'],
      { cwd: work },
    );
    await runProcessOk(
      'tar',
      ['-C', work, '--numeric-owner', '--owner=1000', '--group=1000', '-rf', tar, './testbed'],
      { cwd: work },
    );
    const [repo, tag = 'latest'] = splitReference(set.image);
    await engine.request('POST', '/images/create', {
      query: { fromSrc: '-', repo, tag, changes: `LABEL ${HOST_USR_LABEL}=true` },
      body: await readFile(tar),
      contentType: 'application/x-tar',
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return `${repo}:${tag}`;
  } catch (error) {
    if (options.signal?.aborted) throw error;
    throw new SandboxError(`could not build the Docker image ${set.image}: ${(error as Error).message}`, {
      cause: error,
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function splitReference(image: string): [string, string | undefined] {
  const slash = image.lastIndexOf('/');
  const colon = image.lastIndexOf(':');
  return colon > slash ? [image.slice(0, colon), image.slice(colon + 1)] : [image, undefined];
}
