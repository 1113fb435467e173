/**
 * Applying an image's layers onto a folder, as the engine's overlay would show them: a layer's
 * `.wh.<name>` deletes `<name>` of the layers below, `.wh..wh..opq` hides everything the layers below
 * have in its folder, and every other entry is written (files, folders, symlinks, hard links; device
 * nodes and FIFOs are skipped: a sandbox gets its own `/dev`). Paths are resolved inside the folder as a
 * chroot would (a symlink in a parent is followed, never out of the folder), and nothing is written
 * through a symlink or an existing hard link.
 */
import { createReadStream } from 'node:fs';
import {
  chmod,
  chown,
  lchown,
  link,
  lstat,
  mkdir,
  open,
  readdir,
  readlink,
  rm,
  symlink,
  utimes,
} from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { SandboxError } from '@vime/core';
import { extract, type Header } from 'tar-stream';
import type { ArchiveSpan } from './archive.js';

export const WHITEOUT_PREFIX = '.wh.';
export const OPAQUE_MARKER = '.wh..wh..opq';

export interface LayerStats {
  entries: number;
  /** `.wh.<name>` entries applied. */
  whiteouts: number;
  /** `.wh..wh..opq` entries applied. */
  opaque: number;
  /** Device nodes and FIFOs left out. */
  skipped: number;
}

export interface ApplyLayerOptions {
  /** Keep the entries' owners (only root can; default: whether this process is root). */
  preserveOwner?: boolean | undefined;
  /** Compressed bytes read so far, for progress. */
  onBytes?: ((bytes: number) => void) | undefined;
  signal?: AbortSignal | undefined;
}

const MAX_LINK_HOPS = 40;

/**
 * The host path of `name` inside `root`, resolved as a chroot would: symlinks of its parents are followed
 * (an absolute target from `root`, `..` never above it); the last part is followed only with `followLast`.
 */
export async function pathInRoot(root: string, name: string, followLast = false): Promise<string> {
  const pending = name.split('/').filter((p) => p !== '' && p !== '.');
  const last = followLast ? undefined : pending.pop();
  if (!followLast && (last === undefined || last === '..'))
    throw new SandboxError(`layer entry ${JSON.stringify(name)} names no file`);
  const resolved: string[] = [];
  let hops = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '..') {
      resolved.pop();
      continue;
    }
    const here = join(root, ...resolved, part);
    const st = await lstat(here).catch(() => undefined);
    if (!st?.isSymbolicLink()) {
      resolved.push(part);
      continue;
    }
    if (++hops > MAX_LINK_HOPS)
      throw new SandboxError(`layer entry ${JSON.stringify(name)}: too many symlinks`);
    const target = await readlink(here);
    if (target.startsWith('/')) resolved.length = 0;
    pending.unshift(...target.split('/').filter((p) => p !== '' && p !== '.'));
  }
  return last === undefined ? join(root, ...resolved) : join(root, ...resolved, last);
}

/** The folder holding a layer entry, resolved inside `root`. */
const parentInRoot = (root: string, name: string) =>
  pathInRoot(root, name.split('/').filter(Boolean).slice(0, -1).join('/'), true);

/** Detect the layer's compression from its first bytes: gzip, zstd (refused with the fix) or plain tar. */
async function decompressorFor(path: string, span: ArchiveSpan): Promise<Transform | undefined> {
  const file = await open(path, 'r');
  const magic = Buffer.alloc(4);
  try {
    await file.read(magic, 0, Math.min(4, span.size), span.offset);
  } finally {
    await file.close();
  }
  if (magic[0] === 0x1f && magic[1] === 0x8b) return createGunzip();
  if (magic.readUInt32LE(0) === 0xfd2fb528) {
    throw new SandboxError(
      `${path}: a zstd-compressed layer, which this Node.js cannot decompress; recompress the image with gzip (\`skopeo copy --dest-compress-format gzip …\`) or let the Docker engine export it`,
    );
  }
  return undefined;
}

/** One layer's application: the paths it wrote (for its opaque folders) and what it did. */
class LayerWriter {
  readonly stats: LayerStats = { entries: 0, whiteouts: 0, opaque: 0, skipped: 0 };
  /** Host paths this layer wrote, and their parents: what its opaque folders keep. */
  readonly #written = new Set<string>();

  constructor(
    readonly root: string,
    readonly preserveOwner: boolean,
  ) {}

  async entry(header: Header, body: AsyncIterable<unknown>): Promise<void> {
    this.stats.entries++;
    const parts = header.name.split('/').filter((p) => p !== '' && p !== '.');
    // `./`, the root itself (a layer made with `tar -C dir .`): only its metadata.
    if (parts.length === 0)
      return header.type === 'directory' ? this.#metadata(this.root, header) : undefined;
    const base = parts.at(-1)!;
    if (base === OPAQUE_MARKER) return this.#opaque(header.name);
    if (base.startsWith(WHITEOUT_PREFIX))
      return this.#whiteout(header.name, base.slice(WHITEOUT_PREFIX.length));
    const target = await pathInRoot(this.root, header.name);
    this.#wrote(target);
    switch (header.type) {
      case 'directory':
        return this.#directory(target, header);
      case 'file':
      case 'contiguous-file':
        return this.#file(target, header, body);
      case 'symlink':
        await this.#replace(target);
        await mkdir(join(target, '..'), { recursive: true });
        await symlink(header.linkname || '', target);
        if (this.preserveOwner) await lchown(target, header.uid, header.gid);
        return;
      case 'link': {
        const source = await pathInRoot(this.root, header.linkname || '');
        await this.#replace(target);
        await mkdir(join(target, '..'), { recursive: true });
        await link(source, target);
        return;
      }
      default:
        this.stats.skipped++;
    }
  }

  #wrote(path: string): void {
    for (let p = path; p.length > this.root.length; p = join(p, '..')) {
      if (this.#written.has(p)) break;
      this.#written.add(p);
    }
  }

  /** Whatever is at `path` goes unless it is a folder and a folder comes (its metadata is updated). */
  async #replace(path: string, keepDir = false): Promise<boolean> {
    const st = await lstat(path).catch(() => undefined);
    if (!st) return false;
    if (keepDir && st.isDirectory()) return true;
    await rm(path, { recursive: true, force: true });
    return false;
  }

  async #metadata(path: string, header: Header): Promise<void> {
    if (this.preserveOwner) await chown(path, header.uid, header.gid);
    // After chown, which clears set-id bits.
    await chmod(path, header.mode & 0o7777);
  }

  async #directory(path: string, header: Header): Promise<void> {
    if (!(await this.#replace(path, true))) await mkdir(path, { recursive: true });
    await this.#metadata(path, header);
  }

  async #file(path: string, header: Header, body: AsyncIterable<unknown>): Promise<void> {
    await this.#replace(path);
    await mkdir(join(path, '..'), { recursive: true });
    // `wx`: a path that exists now was not there a moment ago; never write through it.
    const out = await open(path, 'wx', 0o600);
    await pipeline(body, out.createWriteStream());
    await this.#metadata(path, header);
    if (header.mtime) await utimes(path, header.mtime, header.mtime);
  }

  /** `.wh.<name>`: the layers below lose `<name>` (this layer's own entry of that name is kept). */
  async #whiteout(entryName: string, name: string): Promise<void> {
    this.stats.whiteouts++;
    const dir = await parentInRoot(this.root, entryName);
    const target = join(dir, name);
    if (!this.#written.has(target)) await rm(target, { recursive: true, force: true });
  }

  /** `.wh..wh..opq`: the folder keeps only what this layer wrote into it, wherever the marker comes. */
  async #opaque(entryName: string): Promise<void> {
    this.stats.opaque++;
    const dir = await parentInRoot(this.root, entryName);
    this.#wrote(dir);
    await this.#prune(dir);
  }

  async #prune(dir: string): Promise<void> {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      const path = join(dir, name);
      if (!this.#written.has(path)) await rm(path, { recursive: true, force: true });
      else if ((await lstat(path)).isDirectory()) await this.#prune(path);
    }
  }
}

/** Apply one layer (a span of an archive file, gzip or plain tar) onto `root`. */
export async function applyLayer(
  archive: string,
  span: ArchiveSpan,
  root: string,
  options: ApplyLayerOptions = {},
): Promise<LayerStats> {
  const writer = new LayerWriter(root, options.preserveOwner ?? process.getuid?.() === 0);
  const decompress = await decompressorFor(archive, span);
  const raw = createReadStream(archive, { start: span.offset, end: span.offset + span.size - 1 });
  const counted = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      options.onBytes?.(chunk.length);
      done(null, chunk);
    },
  });
  const tar = extract();
  const signal = options.signal ? { signal: options.signal } : {};
  const feeding = decompress
    ? pipeline(raw, counted, decompress, tar, signal)
    : pipeline(raw, counted, tar, signal);
  const applying = (async () => {
    for await (const entry of tar) {
      try {
        await writer.entry(entry.header, entry);
      } finally {
        entry.resume();
      }
    }
  })();
  await Promise.all([feeding, applying]).catch((cause) => {
    raw.destroy();
    if (options.signal?.aborted) throw options.signal.reason;
    if (SandboxError.isInstance(cause)) throw cause;
    throw new SandboxError(`applying a layer of ${archive} failed: ${(cause as Error).message}`, { cause });
  });
  return writer.stats;
}
