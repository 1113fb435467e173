/**
 * The run's images, ready before the first step. Docker: a preflight table (image, size, present or
 * missing), then the missing ones pulled through the engine. Bubblewrap: every row image that no
 * `environments.json` entry overrides turned into a rootfs by the image store (a tarball in
 * `--image-dir`, else the Docker engine's export, pulled through it when missing), once per digest,
 * then a table of what each sandbox will run over. A progress bar on a terminal, a line per image
 * elsewhere.
 */
import { ConfigError, SandboxError, type TaskSpec } from '@vime/core';
import {
  DockerEngine,
  type ImagePresence,
  type ImageProgress,
  type ImageRootfs,
  ImageStore,
  inspectImages,
  pullImage,
} from '@vime/sandbox';
import type { SweEnvironments } from '@vime/swe';
import { Presets, SingleBar } from 'cli-progress';
import type { Config } from './config/schema.js';

export interface PrepareImagesOptions {
  log: (line: string) => void;
  signal?: AbortSignal | undefined;
  /** Draw progress bars (a terminal, not `--quiet`). */
  bars?: boolean | undefined;
}

const MB = 1024 * 1024;
const size = (bytes: number | undefined) => (bytes === undefined ? '—' : `${(bytes / MB).toFixed(1)} MB`);

/** Columns padded to their widest cell, as the run's other tables. */
function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `  ${cells.map((c, i) => c.padEnd(widths[i]!)).join('  ')}`.trimEnd();
  return [line(header), ...rows.map(line)];
}

/** One bar for one image at a time: bytes of its pull, export or unpack. */
class ImageBar {
  readonly #bar: SingleBar | undefined;
  #phase = '';

  constructor(enabled: boolean) {
    this.#bar = enabled
      ? new SingleBar(
          {
            stream: process.stderr,
            format: '{image} {phase} [{bar}] {doneMb}/{totalMb} MB | {duration_formatted}',
            hideCursor: false,
            fps: 5,
          },
          Presets.shades_classic,
        )
      : undefined;
  }

  update = (p: ImageProgress): void => {
    if (!this.#bar) return;
    const payload = {
      image: p.image,
      phase: p.phase,
      doneMb: (p.done / MB).toFixed(1),
      totalMb: p.total === undefined ? '?' : (p.total / MB).toFixed(1),
    };
    const total = Math.max(1, p.total ?? p.done);
    if (p.phase !== this.#phase) {
      if (this.#phase) this.#bar.stop();
      this.#bar.start(total, p.done, payload);
      this.#phase = p.phase;
    }
    this.#bar.setTotal(total);
    this.#bar.update(p.done, payload);
  };

  stop(): void {
    if (this.#phase) this.#bar?.stop();
    this.#phase = '';
  }
}

/** Pull what the engine lacks, after a table of what it has. */
async function dockerImages(images: string[], options: PrepareImagesOptions): Promise<void> {
  const engine = new DockerEngine();
  try {
    const before = await inspectImages(engine, images, { signal: options.signal });
    const missing = before.filter((p) => !p.present);
    options.log(`images (Docker engine at ${engine.address}): ${images.length}, ${missing.length} missing`);
    const row = (p: ImagePresence) => [
      p.image,
      size(p.sizeBytes),
      p.present ? 'present' : 'missing: pulled now',
    ];
    for (const line of table(['image', 'size', 'status'], before.map(row))) options.log(line);
    for (const { image } of missing) {
      const bar = new ImageBar(options.bars ?? false);
      const started = performance.now();
      try {
        await pullImage(engine, image, { signal: options.signal, onProgress: bar.update });
      } finally {
        bar.stop();
      }
      const [after] = await inspectImages(engine, [image], { signal: options.signal });
      options.log(
        `pulled ${image} (${size(after?.sizeBytes)}) in ${((performance.now() - started) / 1000).toFixed(1)} s`,
      );
    }
  } finally {
    await engine.close();
  }
}

/** Every image as a rootfs in the store's cache, then a table of them. */
async function rootfsImages(
  store: ImageStore,
  images: string[],
  options: PrepareImagesOptions,
): Promise<void> {
  options.log(
    `images (bubblewrap rootfs from ${store.describe()}; cache ${store.cacheDir}): ${images.length}`,
  );
  const ready: ImageRootfs[] = [];
  for (const image of images) {
    const bar = new ImageBar(options.bars ?? false);
    try {
      ready.push(await store.rootfs(image, { signal: options.signal, onProgress: bar.update }));
    } finally {
      bar.stop();
    }
  }
  const rows = ready.map((r) => [
    r.image,
    r.digest.slice(0, 19),
    r.source,
    r.extracted ? 'extracted now' : 'cached',
  ]);
  for (const line of table(['image', 'digest', 'source', 'rootfs'], rows)) options.log(line);
}

/** An image no source has, or a registry's refusal of a name, is the dataset's to fix: exit 2, one line. */
function asUserError(error: unknown): unknown {
  if (!SandboxError.isInstance(error)) return error;
  if (
    error.code !== 'image_not_found' &&
    !/manifest unknown|not found|repository does not exist/i.test(error.message)
  )
    return error;
  return new ConfigError(`image_name: ${error.message}`, { cause: error });
}

/**
 * Make every image of the run's tasks ready on its sandbox backend. Returns the image store bubblewrap
 * sandboxes resolve their images in (undefined for docker and local).
 */
export async function prepareImages(
  config: Config,
  tasks: readonly TaskSpec[],
  environments: SweEnvironments,
  options: PrepareImagesOptions,
): Promise<ImageStore | undefined> {
  const distinct = [...new Set(tasks.map((t) => t.image).filter((i): i is string => i !== undefined))];
  if (config.sandbox === 'docker') {
    await dockerImages(distinct, options).catch((error) => {
      throw asUserError(error);
    });
    return undefined;
  }
  if (config.sandbox !== 'bubblewrap') return undefined;
  const store = new ImageStore({ imageDir: config.imageDir });
  // An environments.json entry overrides the image (its rootfs folder or template is used instead).
  const images = distinct.filter((image) => !environments.get(image));
  try {
    if (images.length > 0) await rootfsImages(store, images, options);
  } catch (error) {
    await store.close();
    throw asUserError(error);
  }
  return store;
}
