/**
 * The root a bubblewrap sandbox runs over when its spec names an image: a rootfs folder (an absolute
 * path, or a name in `options.images`), or an image turned into one by the image store. Per sandbox the
 * rootfs stays the read-only lower layer of an overlay (root) or is copied (unprivileged); the work dir
 * starts as a copy of what the image has there, owned by the sandbox user, as a container's would.
 * Paths inside a root are resolved as a chroot would: an image's symlink never leads a host-side write
 * out of it.
 */
import { existsSync, statSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import type { ImageProgress } from '../docker/images.js';
import { HOST_USR_LABEL } from '../docker/provider.js';
import { runHostProcess } from '../host/run-process.js';
import type { HostState } from '../host/state.js';
import { pathInRoot } from '../images/layers.js';
import { ImageStore } from '../images/store.js';
import type { ReadOnlyBind } from '../types.js';
import { assertDir } from './sandbox.js';

const isRoot = () => process.getuid?.() === 0;
const SYSTEM_PATH = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };

/** A sandbox's root folder, with what its image's config asks of the sandbox. */
export interface ResolvedRoot {
  dir: string;
  /** The image's `Env` (`KEY=value`), under the spec's own. */
  env: Record<string, string>;
  /** The image is labelled `dev.vime.host-usr=true`: the host's `/usr` is bound read-only over its own. */
  hostUsr: boolean;
}

export interface RootResolverOptions {
  images?: Record<string, string> | undefined;
  imageStore?: ImageStore | undefined;
  onImageProgress?: ((progress: ImageProgress) => void) | undefined;
}

export class RootResolver {
  #store: ImageStore | undefined;

  constructor(readonly options: RootResolverOptions) {
    this.#store = options.imageStore;
  }

  /** The store images are found in (created on first use: `new ImageStore()`). */
  get store(): ImageStore {
    this.#store ??= new ImageStore();
    return this.#store;
  }

  async resolve(image: string, signal: AbortSignal | undefined): Promise<ResolvedRoot> {
    const named = this.options.images?.[image];
    if (named !== undefined || isAbsolute(image)) {
      const dir = named ?? image;
      await assertDir(dir, 'spec.image');
      return { dir, env: {}, hostUsr: false };
    }
    let found: Awaited<ReturnType<ImageStore['rootfs']>>;
    try {
      found = await this.store.rootfs(image, { signal, onProgress: this.options.onImageProgress });
    } catch (error) {
      const named = Object.keys(this.options.images ?? {}).join(', ') || 'none configured';
      if (ConfigError.isInstance(error)) {
        throw new ConfigError(
          `bubblewrap image ${JSON.stringify(image)} is neither a rootfs folder path, nor a name in options.images (${named}), nor an image reference: ${error.message}`,
          { cause: error },
        );
      }
      if (
        SandboxError.isInstance(error) &&
        (error.code === 'image_not_found' || error.code === 'image_pull_failed')
      ) {
        throw new SandboxError(
          `bubblewrap image ${JSON.stringify(image)}: ${error.message}; or give a rootfs folder (an absolute path, or a name in options.images: ${named})`,
          { cause: error, code: error.code, data: { image } },
        );
      }
      throw error;
    }
    const env: Record<string, string> = {};
    for (const entry of found.config.env) {
      const eq = entry.indexOf('=');
      if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
    }
    return { dir: found.rootfs, env, hostUsr: found.config.labels[HOST_USR_LABEL] === 'true' };
  }
}

/**
 * The python3 a session supervisor runs with, as a path inside the sandbox, if the root has one (a
 * SWE-smith image may have only its conda's).
 */
export function findPython(root: string | undefined): string | undefined {
  for (const candidate of ['/usr/bin/python3', '/usr/local/bin/python3', '/opt/miniconda3/bin/python3']) {
    if (existsSync(join(root ?? '/', candidate))) return candidate;
  }
  return undefined;
}

/** A folder at `path` inside a root: an image's symlink or file there is replaced (in this sandbox's layer). */
async function ownFolder(root: string, path: string): Promise<string> {
  const host = await pathInRoot(root, path);
  const st = await lstat(host).catch(() => undefined);
  if (st && !st.isDirectory()) await rm(host, { force: true });
  await mkdir(host, { recursive: true });
  return host;
}

/** The per-sandbox root over a read-only rootfs: an overlay (root) or a copy (unprivileged). */
export async function prepareRoot(
  state: HostState,
  rootfs: string,
  workdir: string,
  user: { uid: number; gid: number } | undefined,
  signal: AbortSignal | undefined,
  binds: readonly ReadOnlyBind[] = [],
): Promise<string> {
  const root = join(state.dir, 'root');
  const abortable = signal ? { signal } : {};
  if (isRoot()) {
    const upper = join(state.dir, 'upper');
    const work = join(state.dir, 'overlay-work');
    await Promise.all([mkdir(root), mkdir(upper), mkdir(work)]);
    state.meta.mounts.push(root);
    await state.saveMeta();
    const result = await runHostProcess(
      'mount',
      ['-t', 'overlay', 'overlay', '-o', `lowerdir=${rootfs},upperdir=${upper},workdir=${work}`, root],
      { env: SYSTEM_PATH, ...abortable },
    );
    if (result.exitCode !== 0) {
      throw new SandboxError(`overlay mount of rootfs ${rootfs} failed: ${result.output.trim()}`);
    }
  } else {
    const result = await runHostProcess('cp', ['-a', '--reflink=auto', `${rootfs}/.`, root], {
      env: { PATH: '/usr/bin:/bin' },
      ...abortable,
    });
    if (result.exitCode !== 0)
      throw new SandboxError(`copy of rootfs ${rootfs} failed: ${result.output.trim()}`);
  }
  // bwrap mounts over these as the sandbox user, who cannot create them in a root-owned rootfs.
  for (const dir of ['proc', 'dev', 'tmp']) await ownFolder(root, dir);
  for (const bind of binds) {
    if (statSync(bind.source).isDirectory()) await ownFolder(root, bind.target);
    else {
      const parent = await ownFolder(root, join(bind.target, '..'));
      const target = join(parent, bind.target.split('/').at(-1)!);
      const st = await lstat(target).catch(() => undefined);
      if (st && !st.isFile()) await rm(target, { recursive: true, force: true });
      await writeFile(target, '', { flag: 'a' });
    }
  }
  const mountPoint = await ownFolder(root, workdir);
  await chmod(mountPoint, 0o755);
  if (user) await chown(mountPoint, user.uid, user.gid);
  return root;
}

/**
 * Start the work dir as a copy of what the rootfs has at that path (a SWE-smith image's repository at
 * `/testbed`), owned by the sandbox user so its commands can change it. Nothing when the rootfs has
 * nothing there.
 */
export async function seedWorkdir(
  rootfs: string,
  workdir: string,
  hostWork: string,
  user: { uid: number; gid: number } | undefined,
  signal: AbortSignal | undefined,
): Promise<void> {
  const source = await pathInRoot(rootfs, workdir, true);
  if (!source.startsWith(rootfs)) return;
  const st = await lstat(source).catch(() => undefined);
  if (!st?.isDirectory() || (await readdir(source)).length === 0) return;
  const abortable = signal ? { signal } : {};
  const copied = await runHostProcess('cp', ['-a', '--reflink=auto', `${source}/.`, hostWork], {
    env: SYSTEM_PATH,
    ...abortable,
  });
  if (copied.exitCode !== 0) {
    throw new SandboxError(
      `copying the image's ${workdir} into the work dir failed: ${copied.output.trim()}`,
    );
  }
  if (!user) return;
  const owned = await runHostProcess('chown', ['-R', '-P', `${user.uid}:${user.gid}`, hostWork], {
    env: SYSTEM_PATH,
    ...abortable,
  });
  if (owned.exitCode !== 0) {
    throw new SandboxError(`giving the work dir to the sandbox user failed: ${owned.output.trim()}`);
  }
}
