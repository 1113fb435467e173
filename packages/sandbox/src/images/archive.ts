/**
 * Image archives on disk: a `docker save` tarball (`manifest.json`, the engine's `GET /images/{name}/get`)
 * or an OCI image layout in a tar (`oci-layout`, `index.json`, `blobs/`; `skopeo copy … oci-archive:`).
 * Only the entry headers are read to find the manifest, the config and the layers (a seek past each
 * body), so indexing a multi-gigabyte archive costs a few reads.
 */
import { createHash } from 'node:crypto';
import { type FileHandle, open } from 'node:fs/promises';
import { SandboxError } from '@vime/core';
import { sameImage } from './reference.js';

/** Where an entry's body lies in the archive file. */
export interface ArchiveSpan {
  offset: number;
  size: number;
}

/** What a sandbox takes from an image's config (the rest is the engine's business). */
export interface ImageConfig {
  env: string[];
  workingDir: string | undefined;
  user: string | undefined;
  labels: Record<string, string>;
}

export interface ArchiveImage {
  /** The archive file. */
  path: string;
  /** Names the archive gives the image (`RepoTags`, ref-name annotations). */
  names: string[];
  /** `sha256:<hex>` of the config blob: the engine's image id, the same from every source. */
  digest: string;
  config: ImageConfig;
  /** Layers, bottom first. */
  layers: ArchiveSpan[];
}

const BLOCK = 512;

function text(block: Buffer, offset: number, length: number): string {
  const slice = block.subarray(offset, offset + length);
  const end = slice.indexOf(0);
  return (end === -1 ? slice : slice.subarray(0, end)).toString('utf8');
}

/** A numeric header field: octal text, or GNU base-256 (high bit set) for sizes of 8 GiB and more. */
function number(block: Buffer, offset: number, length: number): number {
  if ((block[offset]! & 0x80) !== 0) {
    let value = 0;
    for (let i = offset + 1; i < offset + length; i++) value = value * 256 + block[i]!;
    return value;
  }
  const digits = text(block, offset, length).trim();
  return digits === '' ? 0 : Number.parseInt(digits, 8);
}

const clean = (name: string) => name.replace(/^(\.\/)+/, '').replace(/\/+$/, '');

/** Every regular file of a tar archive with where its body lies (ustar, pax and GNU long names). */
export async function indexTar(file: FileHandle, path: string): Promise<Map<string, ArchiveSpan>> {
  const entries = new Map<string, ArchiveSpan>();
  const header = Buffer.alloc(BLOCK);
  const { size: fileSize } = await file.stat();
  let offset = 0;
  let longName: string | undefined;
  let paxSize: number | undefined;
  while (offset + BLOCK <= fileSize) {
    await file.read(header, 0, BLOCK, offset);
    if (header.every((b) => b === 0)) break;
    const size = paxSize ?? number(header, 124, 12);
    const type = String.fromCharCode(header[156] || 0x30);
    const body = offset + BLOCK;
    offset = body + Math.ceil(size / BLOCK) * BLOCK;
    if (offset > fileSize)
      throw new SandboxError(`${path}: truncated tar archive (an entry runs past the end)`);
    if (type === 'x' || type === 'L') {
      const record = Buffer.alloc(size);
      await file.read(record, 0, size, body);
      if (type === 'L') longName = text(record, 0, size);
      else {
        for (const m of record.toString('utf8').matchAll(/\d+ (path|size)=([^\n]*)\n/g)) {
          if (m[1] === 'path') longName = m[2];
          else paxSize = Number(m[2]);
        }
      }
      continue;
    }
    const prefix = text(header, 345, 155);
    const name = longName ?? (prefix ? `${prefix}/${text(header, 0, 100)}` : text(header, 0, 100));
    longName = undefined;
    paxSize = undefined;
    if (type === '0' || type === '7') entries.set(clean(name), { offset: body, size });
  }
  return entries;
}

async function readSpan(file: FileHandle, span: ArchiveSpan): Promise<Buffer> {
  const body = Buffer.alloc(span.size);
  await file.read(body, 0, span.size, span.offset);
  return body;
}

function configOf(raw: Buffer): ImageConfig {
  const parsed = JSON.parse(raw.toString('utf8')) as {
    config?:
      | {
          Env?: string[] | null | undefined;
          WorkingDir?: string | null | undefined;
          User?: string | null | undefined;
          Labels?: Record<string, string> | null | undefined;
        }
      | null
      | undefined;
  };
  const c = parsed.config ?? {};
  return {
    env: c.Env ?? [],
    workingDir: c.WorkingDir || undefined,
    user: c.User || undefined,
    labels: c.Labels ?? {},
  };
}

interface Descriptor {
  mediaType?: string | undefined;
  digest: string;
  annotations?: Record<string, string> | undefined;
  platform?: { architecture?: string | undefined; os?: string | undefined } | undefined;
}

const blobPath = (digest: string) => `blobs/${digest.replace(':', '/')}`;

/** The engine's name for this machine's architecture (`amd64`, `arm64`). */
const ARCH: Record<string, string> = {
  x64: 'amd64',
  arm64: 'arm64',
  arm: 'arm',
  ppc64: 'ppc64le',
  s390x: 's390x',
};

class ArchiveReader {
  constructor(
    readonly path: string,
    readonly file: FileHandle,
    readonly entries: Map<string, ArchiveSpan>,
  ) {}

  span(name: string): ArchiveSpan {
    const span = this.entries.get(clean(name));
    if (!span) throw new SandboxError(`${this.path}: the image archive has no ${name}`);
    return span;
  }

  async json<T>(name: string): Promise<T> {
    const raw = await readSpan(this.file, this.span(name));
    try {
      return JSON.parse(raw.toString('utf8')) as T;
    } catch (cause) {
      throw new SandboxError(`${this.path}: ${name} is not JSON`, { cause });
    }
  }

  async image(names: string[], configName: string, layerNames: string[]): Promise<ArchiveImage> {
    const raw = await readSpan(this.file, this.span(configName));
    return {
      path: this.path,
      names,
      digest: `sha256:${createHash('sha256').update(raw).digest('hex')}`,
      config: configOf(raw),
      layers: layerNames.map((n) => this.span(n)),
    };
  }

  /** `docker save`: `manifest.json` lists each image's config, tags and layer files. */
  async dockerSave(): Promise<ArchiveImage[]> {
    const manifest =
      await this.json<Array<{ Config: string; RepoTags?: string[] | null | undefined; Layers: string[] }>>(
        'manifest.json',
      );
    return Promise.all(manifest.map((m) => this.image(m.RepoTags ?? [], m.Config, m.Layers)));
  }

  /** OCI layout: `index.json` → (an index per platform →) manifest → config and layer blobs. */
  async ociLayout(): Promise<ArchiveImage[]> {
    const index = await this.json<{ manifests: Descriptor[] }>('index.json');
    const images: ArchiveImage[] = [];
    for (const top of index.manifests) {
      const names = [
        top.annotations?.['io.containerd.image.name'],
        top.annotations?.['org.opencontainers.image.ref.name'],
      ].filter((n): n is string => typeof n === 'string' && n.length > 0);
      let descriptor = top;
      if (
        top.mediaType?.endsWith('image.index.v1+json') ||
        top.mediaType?.endsWith('manifest.list.v2+json')
      ) {
        const nested = await this.json<{ manifests: Descriptor[] }>(blobPath(top.digest));
        const arch = ARCH[process.arch] ?? process.arch;
        const match = nested.manifests.find(
          (m) => m.platform?.architecture === arch && m.platform?.os === 'linux',
        );
        if (!match) continue;
        descriptor = match;
      }
      const manifest = await this.json<{ config: Descriptor; layers: Descriptor[] }>(
        blobPath(descriptor.digest),
      );
      images.push(
        await this.image(
          names,
          blobPath(manifest.config.digest),
          manifest.layers.map((l) => blobPath(l.digest)),
        ),
      );
    }
    return images;
  }
}

/** The images an archive holds (a `docker save` tarball or an OCI layout tar). */
export async function readImageArchive(path: string): Promise<ArchiveImage[]> {
  const file = await open(path, 'r').catch((cause) => {
    throw new SandboxError(`cannot open the image archive ${path}: ${(cause as Error).message}`, { cause });
  });
  try {
    const reader = new ArchiveReader(path, file, await indexTar(file, path));
    if (reader.entries.has('manifest.json')) return await reader.dockerSave();
    if (reader.entries.has('index.json')) return await reader.ociLayout();
    throw new SandboxError(
      `${path} is neither a docker save archive (manifest.json) nor an OCI image layout (index.json); make one with \`docker save NAME -o FILE.tar\` or \`skopeo copy docker://NAME oci-archive:FILE.tar:NAME\``,
    );
  } finally {
    await file.close();
  }
}

/** The image of an archive that a reference names. */
export function findImage(images: readonly ArchiveImage[], reference: string): ArchiveImage | undefined {
  return images.find((image) => image.names.some((n) => sameImage(n, reference)));
}
