/**
 * The README's real-data recipe, run as written, on SWE-smith rows whose environments are Docker images
 * and nothing else: a parquet with no `environments.json` beside it, its rows naming an image (the offline
 * task set's repository at `/testbed`) built here and pushed to a real registry (Debian's
 * `docker-registry`, the distribution registry v2) on loopback, then removed from the engine. With
 * `--sandbox docker` the run pulls it through the engine before the first step (a preflight table, then
 * the pull); on the default bubblewrap provider the run turns the engine's image into a rootfs (exported
 * once, cached by digest). Both check every row first (the unchanged repository grades 0, the gold patch
 * 1) and train on them. The engine is the stand-in (a scripted policy behind SGLang's wire, not a model),
 * as the README's `--engine-url` would be a real one. The same image as an OCI archive made by skopeo
 * gives the same rootfs (files, modes, owners, sizes) from an image folder.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { DockerEngine, defaultDockerSocket, ImageStore, pushImage } from '@vime/sandbox';
import { buildOfflineDockerImage, buildOfflineTaskSet, writeSweSmithParquet } from '@vime/swe';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type CommandRun, NODE_ARGS, REPO_ROOT, runCommand } from '../__fixtures__/run-command.js';
import { bundledTokenizerDir } from '../defaults.js';

const root = REPO_ROOT;
const REGISTRY = '/usr/bin/docker-registry';
const SKOPEO = '/usr/bin/skopeo';

/** Why this file cannot run here, or undefined. */
function missing(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (a private Docker engine, overlay rootfs)';
  if (!existsSync(defaultDockerSocket()))
    return `no Docker engine socket at ${defaultDockerSocket()} (run under scripts/docker-up.sh)`;
  if (!existsSync(REGISTRY))
    return `${REGISTRY} is missing (Debian's docker-registry; scripts/bootstrap.sh test)`;
  if (!existsSync(SKOPEO)) return `${SKOPEO} is missing (Debian's skopeo; scripts/bootstrap.sh test)`;
  return undefined;
}
const reason = missing();
if (reason) console.warn(`swesmith-images.test.ts skipped: ${reason}`);

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<CommandRun> {
  return runCommand(command, args, { env, timeoutMs });
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function waitFor(check: () => Promise<boolean>, what: string, budgetMs = 60_000): Promise<void> {
  const deadline = Date.now() + budgetMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${budgetMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A child that prints `listening on URL` (the stand-in engine). */
function startEngine(dataset: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [...NODE_ARGS, 'packages/loop/src/standin-server.ts', '--dataset', dataset],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (d) => {
      text += d;
      const m = /listening on (http:\/\/\S+)/.exec(text);
      if (m) resolve({ child, url: m[1]! });
    });
    child.on('exit', (code) => reject(new Error(`stand-in engine exited with ${code}`)));
  });
}

describe.skipIf(reason !== undefined)("the README's real-data recipe on SWE-smith images", () => {
  let tmp: string;
  let registry: ChildProcess | undefined;
  let engineProcess: ChildProcess | undefined;
  let engineUrl: string;
  let image: string;
  let dataset: string;
  let cache: string;
  const engine = new DockerEngine();
  const outs: string[] = [];

  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'vime-swesmith-images-'));
    const port = await freePort();
    await writeFile(
      join(tmp, 'registry.yml'),
      `version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: ${tmp}/registry\nhttp:\n  addr: 127.0.0.1:${port}\n`,
    );
    registry = spawn(REGISTRY, ['serve', join(tmp, 'registry.yml')], { stdio: 'ignore' });
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/v2/`)).ok, 'the registry answering');

    const set = await buildOfflineTaskSet({ dir: inject('offlineTasksDir') });
    image = `127.0.0.1:${port}/${set.image}:latest`;
    await buildOfflineDockerImage(engine, { image, repoDir: set.repoDir });
    await pushImage(engine, image);
    // Only the registry has it now: the run must pull it.
    await engine.request('DELETE', `/images/${encodeURIComponent(image)}`, { query: { force: true } });

    // Three rows of the set, naming the registry's image; nothing else next to them.
    dataset = join(tmp, 'data', 'rows.parquet');
    await rm(dirname(dataset), { recursive: true, force: true });
    execFileSync('mkdir', ['-p', dirname(dataset)]);
    await writeSweSmithParquet(
      dataset,
      set.rows.slice(0, 3).map((r) => ({ ...r, image_name: image })),
    );
    cache = join(tmp, 'xdg-cache');
    ({ child: engineProcess, url: engineUrl } = await startEngine(dataset));
  }, 300_000);

  afterAll(async () => {
    engineProcess?.kill('SIGTERM');
    registry?.kill('SIGTERM');
    await engine
      .request('DELETE', `/images/${encodeURIComponent(image)}`, { query: { force: true }, ok: [404] })
      .catch(() => {});
    await engine.close();
    for (const out of outs) await rm(out, { recursive: true, force: true });
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  /** `pnpm coding-agent -- --dataset … --engine-url … --tokenizer …`, as the README writes it. */
  async function recipe(extra: string[]): Promise<{ run: CommandRun; out: string }> {
    const env = { ...process.env, XDG_CACHE_HOME: cache };
    const args = [
      'coding-agent',
      '--',
      '--dataset',
      dataset,
      '--engine-url',
      engineUrl,
      '--tokenizer',
      bundledTokenizerDir(),
      ...extra,
    ];
    const result = await run('pnpm', args, env, 560_000);
    const report = /^report: +(\S+)\/report\.html$/m.exec(result.stdout);
    const out = report ? resolve(root, report[1]!) : '';
    if (out) outs.push(out);
    return { run: result, out };
  }

  function checkRun(r: { run: CommandRun; out: string }): void {
    expect(r.run.code, `${r.run.stdout.slice(-3000)}\n${r.run.stderr.slice(-3000)}`).toBe(0);
    // Every row checked on its image: the unchanged repository grades 0 and the gold patch 1.
    expect(r.run.stdout).toMatch(/baseline check: 3 of 3 rows pass/);
    expect(r.run.stdout).not.toMatch(/excluded /);
    const results = [1, 2].flatMap(
      (step) =>
        JSON.parse(readFileSync(join(r.out, 'steps', `${step}.results.json`), 'utf8')) as Array<{
          status: string;
          reward?: number;
        }>,
    );
    expect(results.length).toBe(32);
    expect(new Set(results.filter((x) => x.reward !== undefined).map((x) => x.reward))).toEqual(
      new Set([0, 1]),
    );
  }

  it('--sandbox docker: a preflight table, the missing image pulled from the registry, every row graded', {
    timeout: 600_000,
  }, async () => {
    const r = await recipe(['--sandbox', 'docker']);
    checkRun(r);
    expect(r.run.stdout).toMatch(/images \(Docker engine at .*\): 1, 1 missing/);
    expect(r.run.stdout).toContain(image);
    expect(r.run.stdout).toMatch(/missing: pulled now/);
    expect(r.run.stdout).toMatch(
      new RegExp(`pulled ${image.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\([\\d.]+ MB\\)`),
    );
    const after = await engine.request('GET', `/images/${encodeURIComponent(image)}/json`, { ok: [404] });
    expect(after.status).toBe(200);
  });

  it('the default bubblewrap provider: the image turned into a rootfs once, every row graded over it', {
    timeout: 600_000,
  }, async () => {
    // Not in the engine again: bubblewrap's image store pulls it through the engine, then exports it.
    await engine.request('DELETE', `/images/${encodeURIComponent(image)}`, {
      query: { force: true },
      ok: [404],
    });
    const r = await recipe([]);
    checkRun(r);
    expect(r.run.stdout).toMatch(/sandboxes: bubblewrap/);
    expect(r.run.stdout).toMatch(/images \(bubblewrap rootfs from the Docker engine at .*\): 1/);
    expect(r.run.stdout).toMatch(/sha256:[0-9a-f]{12} +docker:\S+ +extracted now/);
    const inspect = JSON.parse(
      (await engine.request('GET', `/images/${encodeURIComponent(image)}/json`)).body.toString(),
    ) as { Id: string };
    const rootfs = join(cache, 'vime', 'rootfs', inspect.Id.replace('sha256:', ''), 'rootfs');
    expect(existsSync(join(rootfs, 'testbed', '.git'))).toBe(true);

    // The same image as an OCI archive (skopeo, from the registry) in an image folder: the same files.
    // (skopeo rewrites the config into OCI's form on the way, so its digest is not the engine's.)
    const images = join(tmp, 'images');
    execFileSync('mkdir', ['-p', images]);
    execFileSync(SKOPEO, [
      'copy',
      '--src-tls-verify=false',
      `docker://${image}`,
      `oci-archive:${images}/toolbelt.tar:${image}`,
    ]);
    const store = new ImageStore({ cacheDir: join(tmp, 'other-cache'), imageDir: images, docker: false });
    const fromTarball = await store.rootfs(image);
    expect(fromTarball.source).toBe(join(images, 'toolbelt.tar'));
    expect(fromTarball.extracted).toBe(true);
    const list = (dir: string) =>
      execFileSync('sh', ['-c', `cd ${dir} && find . -printf '%p %m %U:%G %s\\n' | sort`], {
        encoding: 'utf8',
      });
    expect(list(fromTarball.rootfs)).toBe(list(rootfs));
  });
});
