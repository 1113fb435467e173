/**
 * Image rootfs folders for bubblewrap: an image turned once into a read-only folder, kept in a cache
 * folder by image digest (the sha256 of its config, the engine's image id), so a second sandbox, run or
 * process of the same image extracts nothing, and a changed image (a new digest under the same name) is
 * extracted anew. Sources, in this order:
 *
 * 1. a folder of image tarballs (`docker save` or OCI layout tars, any file names; the names inside
 *    each archive say which images it holds);
 * 2. the Docker engine: an image it has is exported (`GET /images/{name}/get`); one it lacks is pulled
 *    through it first (`POST /images/create`).
 */
import { createWriteStream, existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { SandboxError } from '@vime/core';
import { DockerEngine, defaultDockerSocket } from '../docker/engine-api.js';
import { type ImageProgress, pullImage } from '../docker/images.js';
import { type ArchiveImage, findImage, type ImageConfig, readImageArchive } from './archive.js';
import { applyLayer } from './layers.js';
import { parseImageReference } from './reference.js';

/** Options of an `ImageStore`. */
export interface ImageStoreOptions {
  /** Where extracted rootfs folders are kept (default `defaultImageCacheDir()`). */
  cacheDir?: string | undefined;
  /** A folder of image tarballs (`docker save` or OCI layout), looked in first. */
  imageDir?: string | undefined;
  /**
   * The engine images are exported from (and pulled through when missing); default: the engine at
   * `DOCKER_HOST` or `/var/run/docker.sock` when that socket exists. `false`: tarballs only.
   */
  docker?: DockerEngine | false | undefined;
  /** Pull an image the engine lacks (default true). */
  pull?: boolean | undefined;
}

/** An image turned into a rootfs folder: where it is, the image's digest, env and labels. */
export interface ImageRootfs {
  image: string;
  /** `sha256:<hex>` of the image config. */
  digest: string;
  /** The read-only rootfs folder. */
  rootfs: string;
  config: ImageConfig;
  /** Where it came from: the tarball's path, or `docker:<socket>`. */
  source: string;
  /** False when the cache already had it. */
  extracted: boolean;
}

/** Options of `ImageStore.resolve`. */
export interface ResolveOptions {
  signal?: AbortSignal | undefined;
  /** Called with the bytes done and known so far while an image is pulled or extracted. */
  onProgress?: ((progress: ImageProgress) => void) | undefined;
}

/** `$XDG_CACHE_HOME/vime/rootfs`, else `~/.cache/vime/rootfs`. */
export function defaultImageCacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'vime', 'rootfs');
}

const META = 'image.json';
const hexOf = (digest: string) => digest.replace(/^sha256:/, '');

/**
 * Turns image references into read-only rootfs folders for bubblewrap, once per image digest: from tarballs
 * in `imageDir`, else from the Docker engine's export (pulled when it lacks the image). Each image resolves
 * once per store, so every sandbox of a run runs the version it started with.
 */
export class ImageStore {
  readonly cacheDir: string;
  readonly imageDir: string | undefined;
  readonly #docker: DockerEngine | undefined;
  readonly #pull: boolean;
  readonly #ownsDocker: boolean;
  #archives: Promise<ArchiveImage[]> | undefined;
  /** Each image as first resolved: every sandbox of this store runs the same version of it. */
  readonly #resolved = new Map<string, Promise<ImageRootfs>>();

  constructor(options: ImageStoreOptions = {}) {
    this.cacheDir = options.cacheDir ?? defaultImageCacheDir();
    this.imageDir = options.imageDir;
    this.#docker =
      options.docker === false
        ? undefined
        : (options.docker ?? (existsSync(defaultDockerSocket()) ? new DockerEngine() : undefined));
    this.#pull = options.pull ?? true;
    this.#ownsDocker = options.docker === undefined && this.#docker !== undefined;
  }

  /** The sources looked in, in order, for messages. */
  describe(): string {
    const sources = [
      ...(this.imageDir ? [`image tarballs in ${this.imageDir}`] : []),
      ...(this.#docker ? [`the Docker engine at ${this.#docker.address}`] : []),
    ];
    return sources.length > 0
      ? sources.join(', then ')
      : 'no source (no image folder, no Docker engine socket)';
  }

  /**
   * The rootfs of an image, extracted once per digest. A store resolves each image once (concurrent calls
   * share the work, later ones get the same folder, `extracted: false`), so a run that changes an image
   * under the same name midway keeps running the version it started with; a failure is not kept.
   */
  async rootfs(image: string, options: ResolveOptions = {}): Promise<ImageRootfs> {
    parseImageReference(image);
    const known = this.#resolved.get(image);
    if (known) {
      const first = await known;
      return first.extracted ? { ...first, extracted: false } : first;
    }
    const pending = this.#resolve(image, options);
    this.#resolved.set(image, pending);
    pending.catch(() => this.#resolved.delete(image));
    return pending;
  }

  async #resolve(image: string, options: ResolveOptions): Promise<ImageRootfs> {
    const archived = await this.#fromArchives(image);
    if (archived) return this.#extract(image, archived, archived.path, options);
    const docker = this.#docker;
    if (docker) {
      const id = await this.#engineImageId(docker, image, options);
      if (id) {
        const cached = await this.#cached(image, id, `docker:${docker.address}`);
        if (cached) return cached;
        return this.#fromEngine(docker, image, options);
      }
    }
    throw new SandboxError(
      `image ${JSON.stringify(image)} was not found in ${this.describe()}; put a \`docker save\` or OCI tarball of it in the image folder (--image-dir), or make it available to the Docker engine (DOCKER_HOST)`,
      { code: 'image_not_found', data: { image } },
    );
  }

  #fromArchives(image: string): Promise<ArchiveImage | undefined> {
    if (!this.imageDir) return Promise.resolve(undefined);
    const dir = this.imageDir;
    this.#archives ??= (async () => {
      const names = await readdir(dir).catch((cause) => {
        throw new SandboxError(`image folder ${dir}: ${(cause as Error).message}`, {
          cause,
          code: 'not_found',
        });
      });
      const tars = names.filter((n) => n.endsWith('.tar')).sort();
      return (await Promise.all(tars.map((n) => readImageArchive(join(dir, n))))).flat();
    })();
    return this.#archives.then((images) => findImage(images, image));
  }

  /** The engine's id of an image, pulling it first when it lacks it; undefined when it has none. */
  async #engineImageId(
    docker: DockerEngine,
    image: string,
    options: ResolveOptions,
  ): Promise<string | undefined> {
    const inspect = async () => {
      const res = await docker.request('GET', `/images/${encodeURIComponent(image)}/json`, {
        ok: [404],
        signal: options.signal,
      });
      return res.status === 404 ? undefined : (JSON.parse(res.body.toString()) as { Id: string }).Id;
    };
    const id = await inspect();
    if (id || !this.#pull) return id;
    await pullImage(docker, image, options);
    return inspect();
  }

  async #cached(image: string, digest: string, source: string): Promise<ImageRootfs | undefined> {
    const dir = join(this.cacheDir, hexOf(digest));
    const meta = await readFile(join(dir, META), 'utf8').catch(() => undefined);
    if (meta === undefined) return undefined;
    const { config } = JSON.parse(meta) as { config: ImageConfig };
    return { image, digest, rootfs: join(dir, 'rootfs'), config, source, extracted: false };
  }

  /** Export the image from the engine as a `docker save` archive (in the cache folder), then extract it. */
  async #fromEngine(docker: DockerEngine, image: string, options: ResolveOptions): Promise<ImageRootfs> {
    await mkdir(this.cacheDir, { recursive: true, mode: 0o755 });
    const work = await mkdtemp(join(this.cacheDir, '.export-'));
    try {
      const file = join(work, 'image.tar');
      const body = await docker.stream('GET', `/images/${encodeURIComponent(image)}/get`, {
        signal: options.signal,
      });
      let done = 0;
      body.on('data', (chunk: Buffer) => {
        done += chunk.length;
        options.onProgress?.({ image, phase: 'export', done, total: undefined });
      });
      await pipeline(body, createWriteStream(file), options.signal ? { signal: options.signal } : {});
      const archived = (await readImageArchive(file))[0];
      if (!archived) throw new SandboxError(`the engine's export of ${image} holds no image`);
      return await this.#extract(image, archived, `docker:${docker.address}`, options);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /**
   * Apply the layers into a fresh folder and move it into place in one rename, the metadata written
   * last: a folder in the cache is always complete, and a second extraction of the same digest (another
   * process) keeps the first.
   */
  async #extract(
    image: string,
    archived: ArchiveImage,
    source: string,
    options: ResolveOptions,
  ): Promise<ImageRootfs> {
    const cached = await this.#cached(image, archived.digest, source);
    if (cached) return cached;
    await mkdir(this.cacheDir, { recursive: true, mode: 0o755 });
    const work = await mkdtemp(join(this.cacheDir, '.extract-'));
    const final = join(this.cacheDir, hexOf(archived.digest));
    try {
      const rootfs = join(work, 'rootfs');
      await mkdir(rootfs, { mode: 0o755 });
      const total = archived.layers.reduce((sum, l) => sum + l.size, 0);
      let done = 0;
      for (const layer of archived.layers) {
        await applyLayer(archived.path, layer, rootfs, {
          signal: options.signal,
          onBytes: (n) => {
            done += n;
            options.onProgress?.({ image, phase: 'unpack', done, total });
          },
        });
      }
      await writeFile(
        join(work, META),
        `${JSON.stringify({ image, digest: archived.digest, names: archived.names, config: archived.config }, null, 2)}\n`,
      );
      await rename(work, final).catch(async (error: NodeJS.ErrnoException) => {
        if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
      });
    } finally {
      await rm(work, { recursive: true, force: true });
    }
    const result = await this.#cached(image, archived.digest, source);
    if (!result) throw new SandboxError(`the rootfs of ${image} was not kept in ${final}`);
    return { ...result, extracted: true };
  }

  /** Close the Docker engine connection the store opened (not one it was given). */
  async close(): Promise<void> {
    if (this.#ownsDocker) await this.#docker?.close();
  }
}
