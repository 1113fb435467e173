/**
 * Images in the Docker engine: which of a run's images are present and how large (the preflight), and
 * pulling the missing ones through the engine (`POST /images/create`), whose streamed progress is summed
 * over the layers for one progress bar. The engine does the pulling, with its own registry settings
 * (mirrors, credentials, insecure registries); nothing here talks to a registry.
 */
import type { Readable } from 'node:stream';
import { SandboxError } from '@vime/core';
import { parseImageReference, pullQuery } from '../images/reference.js';
import type { DockerEngine } from './engine-api.js';

/** Whether the Docker engine holds an image, and its id and size when it does. */
export interface ImagePresence {
  image: string;
  present: boolean;
  /** The engine's image id (`sha256:…`, the digest of its config) when present. */
  id?: string | undefined;
  /** Size on the engine's disk, bytes, when present. */
  sizeBytes?: number | undefined;
}

/** Progress of getting an image ready: bytes of its layers (pull, unpack) or of its export. */
export interface ImageProgress {
  image: string;
  phase: 'pull' | 'export' | 'unpack';
  done: number;
  /** Grows while a pull learns the sizes of its layers; undefined when not known yet. */
  total: number | undefined;
}

/** Options of a pull through the Docker engine. */
export interface PullOptions {
  signal?: AbortSignal | undefined;
  /** Called with the bytes done and known so far, summed over the image's layers. */
  onProgress?: ((progress: ImageProgress) => void) | undefined;
}

interface ProgressMessage {
  id?: string | undefined;
  status?: string | undefined;
  progressDetail?: { current?: number | undefined; total?: number | undefined } | undefined;
  error?: string | undefined;
  errorDetail?: { message?: string | undefined } | undefined;
}

/** Hand each JSON message of an engine's progress stream to `onMessage`; an `error` message throws. */
export async function followProgress(
  stream: Readable,
  what: string,
  onMessage: (message: ProgressMessage) => void = () => {},
): Promise<void> {
  let pending = '';
  const handle = (line: string) => {
    if (line.trim() === '') return;
    let message: ProgressMessage;
    try {
      message = JSON.parse(line) as ProgressMessage;
    } catch {
      return; // a line that is not JSON carries no state
    }
    if (message.error !== undefined || message.errorDetail?.message !== undefined) {
      throw new SandboxError(`${what}: ${message.errorDetail?.message ?? message.error}`, {
        code: 'image_pull_failed',
      });
    }
    onMessage(message);
  };
  for await (const chunk of stream) {
    pending += (chunk as Buffer).toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) handle(line);
  }
  handle(pending);
}

/** Which images the engine has, with their ids and sizes, in the order given (names checked first). */
export async function inspectImages(
  engine: DockerEngine,
  images: readonly string[],
  options: { signal?: AbortSignal | undefined } = {},
): Promise<ImagePresence[]> {
  for (const image of images) parseImageReference(image, 'image_name');
  return Promise.all(
    images.map(async (image) => {
      const res = await engine.request('GET', `/images/${encodeURIComponent(image)}/json`, {
        ok: [404],
        signal: options.signal,
      });
      if (res.status === 404) return { image, present: false };
      const info = JSON.parse(res.body.toString()) as { Id?: string | undefined; Size?: number | undefined };
      return { image, present: true, id: info.Id, sizeBytes: info.Size };
    }),
  );
}

/**
 * Pull one image through the engine, reporting the bytes downloaded over every layer. A registry that
 * cannot be reached, an unknown name or tag, or refused credentials throw `image_pull_failed` with the
 * engine's words.
 */
export async function pullImage(
  engine: DockerEngine,
  image: string,
  options: PullOptions = {},
): Promise<void> {
  const { fromImage, tag } = pullQuery(image);
  const layers = new Map<string, { done: number; total: number | undefined }>();
  const report = () => {
    let done = 0;
    let total = 0;
    let known = layers.size > 0;
    for (const l of layers.values()) {
      done += l.done;
      if (l.total === undefined) known = false;
      else total += l.total;
    }
    options.onProgress?.({ image, phase: 'pull', done, total: known ? total : undefined });
  };
  const what = `pulling ${image} through the engine at ${engine.address}`;
  const stream = await engine
    .stream('POST', '/images/create', { query: { fromImage, tag }, signal: options.signal })
    .catch((error) => {
      // The engine refused before streaming (an unreachable registry, a name it cannot resolve).
      if (!SandboxError.isInstance(error) || error.code === 'sandbox_unavailable') throw error;
      throw new SandboxError(`${what}: ${error.message}`, { cause: error, code: 'image_pull_failed' });
    });
  await followProgress(stream, what, (m) => {
    if (!m.id || m.status === undefined) return;
    const layer = layers.get(m.id) ?? { done: 0, total: undefined };
    if (m.status === 'Pulling fs layer' || m.status === 'Waiting') layers.set(m.id, layer);
    else if (m.status === 'Downloading') {
      layer.done = m.progressDetail?.current ?? layer.done;
      layer.total = m.progressDetail?.total ?? layer.total;
      layers.set(m.id, layer);
    } else if (
      m.status === 'Download complete' ||
      m.status === 'Already exists' ||
      m.status === 'Pull complete'
    ) {
      if (layer.total === undefined) layer.total = layer.done;
      layer.done = layer.total;
      layers.set(m.id, layer);
    } else return;
    report();
  });
}

/** Push an image to the registry its name names, through the engine (anonymous credentials). */
export async function pushImage(
  engine: DockerEngine,
  image: string,
  options: { signal?: AbortSignal | undefined } = {},
): Promise<void> {
  const { fromImage, tag } = pullQuery(image);
  const stream = await engine.stream('POST', `/images/${fromImage}/push`, {
    query: { tag },
    headers: { 'X-Registry-Auth': Buffer.from('{}').toString('base64') },
    signal: options.signal,
  });
  await followProgress(stream, `pushing ${image} through the engine at ${engine.address}`);
}
