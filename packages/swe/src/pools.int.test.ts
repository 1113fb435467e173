/**
 * One warm pool per repo image, named as the reference setup names them, each sandbox prepared with its
 * image's environment; a claim beyond a pool's warm size falls back to an on-demand sandbox of the row's
 * own image. On bubblewrap, with a dataset of two repos.
 */
import { chmodSync, cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bubblewrapProvider, ImageStore, localProvider } from '@vime/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sharedOfflineSet } from './__fixtures__/offline-set.js';
import { rowToTask, type SweSmithRow } from './dataset.js';
import { loadJsonl } from './dataset-file.js';
import { SweEnvironments } from './environment.js';
import { SwePools } from './pools.js';

const work = mkdtempSync(join(tmpdir(), 'vime-swe-pools-'));
// The sandbox user (not root) must be able to reach its work dir below this folder.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

let dataset: string;
beforeAll(async () => {
  const set = await sharedOfflineSet();
  // A second repo: the same library under another mirror name and image, with its own environment.
  const other = (r: SweSmithRow): SweSmithRow => ({
    ...r,
    instance_id: r.instance_id.replace('vime__toolbelt', 'vime__toolbelt2'),
    repo: r.repo.replace('vime__toolbelt', 'vime__toolbelt2'),
    image_name: r.image_name.replace('toolbelt', 'toolbelt2'),
  });
  const rows = [...set.rows.slice(0, 3), ...set.rows.slice(3, 5).map(other)];
  cpSync(set.repoDir, join(work, 'env-a'), { recursive: true });
  cpSync(set.repoDir, join(work, 'env-b'), { recursive: true });
  dataset = join(work, 'two-repos.jsonl');
  writeFileSync(dataset, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  writeFileSync(
    join(work, 'environments.json'),
    JSON.stringify({
      version: 1,
      environments: {
        [rows[0]!.image_name]: { template: 'env-a' },
        [rows[3]!.image_name]: { template: 'env-b' },
      },
    }),
  );
}, 300_000);

describe('SwePools', () => {
  it('makes one pool per repo image with the reference naming, and falls back to the row image past the warm ones', async () => {
    const { rows } = await loadJsonl(dataset, { onInvalid: 'fatal' });
    const tasks = rows.map((r) => rowToTask(r, { runSuffix: 'run-7' }));
    const environments = await SweEnvironments.forDataset(dataset);
    const pools = new SwePools(bubblewrapProvider({ rootDir: join(work, 'sbx') }), tasks, {
      kind: 'bubblewrap',
      environments,
      replicas: 1,
    });
    try {
      const [a, b] = rows.map((r) => r.repo).filter((r, i, all) => all.indexOf(r) === i);
      expect(pools.names).toEqual([
        `swesmith-${a!.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}-run-7`,
        `swesmith-${b!.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}-run-7`,
      ]);
      await pools.ready();
      const claimed = await Promise.all([
        pools.claim(tasks[0]!),
        pools.claim(tasks[1]!),
        pools.claim(tasks[3]!),
      ]);
      try {
        const stats = pools.stats();
        expect(stats.map((s) => s.image)).toEqual([rows[0]!.image_name, rows[3]!.image_name]);
        expect(stats[0]).toMatchObject({ warmHits: 1, fallbacks: 1 });
        expect(stats[1]).toMatchObject({ warmHits: 1, fallbacks: 0 });
        // Warm or on demand, each sandbox holds its repo's mirror (main and the instance branches).
        for (const sandbox of claimed) {
          const branches = (await sandbox.exec('git for-each-ref refs/heads | wc -l')).stdout;
          expect(Number(branches)).toBeGreaterThan(10);
        }
      } finally {
        await Promise.all(claimed.map((s) => pools.release(s)));
      }
    } finally {
      await pools.close();
    }
  }, 120_000);

  it('runs bubblewrap over the row image itself when no environment lists it, naming the fix when none has it', async () => {
    const { rows } = await loadJsonl(dataset, { onInvalid: 'fatal' });
    const task = rowToTask({
      ...rows[0]!,
      image_name: 'swebench/swesmith.x86_64.unknown_1776_repo.12345678',
    });
    const images = await mkdtemp(join(tmpdir(), 'vime-pools-images-'));
    const store = new ImageStore({ cacheDir: join(images, 'cache'), imageDir: images, docker: false });
    const pools = new SwePools(bubblewrapProvider({ imageStore: store }), [task], {
      kind: 'bubblewrap',
      environments: new SweEnvironments(),
    });
    try {
      await expect(pools.claim(task)).rejects.toThrow(
        /image "swebench\/swesmith\.x86_64\.unknown_1776_repo\.12345678" was not found in image tarballs in .*--image-dir/,
      );
    } finally {
      await pools.close();
      await rm(images, { recursive: true, force: true });
    }
    // The local provider runs no image: it needs the environment listed.
    expect(
      () =>
        new SwePools(localProvider(), [task], {
          kind: 'local',
          environments: new SweEnvironments(),
        }),
    ).toThrow(/no local environment for image .*environments\.json/);
  });
});
