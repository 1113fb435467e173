/**
 * One command in a pod through the API's `exec` subresource, with the official client's `Exec` (a
 * WebSocket speaking `v5.channel.k8s.io`, else `v4.channel.k8s.io`: every frame starts with its channel,
 * 0 stdin, 1 stdout, 2 stderr, 3 the status; v5 also closes stdin with the frame `255 0`). The exit code
 * comes from the status channel's `Status` object: `Success`, or `Failure` with reason `NonZeroExitCode`
 * and the code in `details.causes[reason=ExitCode].message`, as Go's client reads it
 * (kubernetes/kubernetes staging/src/k8s.io/client-go/tools/remotecommand/v4.go @
 * 01c557f1f07ecb1c033cd3112638ff416264f0db, errorDecoderV4; channel numbers and protocol names in
 * staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go @
 * 773559c09fdbb35e0a2e64b0edb68424eecf1c5a); the JavaScript client's side is dist/web-socket-handler.js
 * of @kubernetes/client-node 2.0.2.
 */
import { Readable, Writable } from 'node:stream';
import { Exec, type KubeConfig, type V1Status } from '@kubernetes/client-node';
import { SandboxError } from '@vime/core';
import { KubernetesRateLimitError } from './client.js';

/** Where one exec's bytes go. */
export interface ExecSinks {
  stdout: (chunk: Buffer) => void;
  stderr: (chunk: Buffer) => void;
}

/** What one exec ended with: its exit code, or why none came. */
export interface PodExecResult {
  exitCode: number;
}

/** The exit code a status-channel `Status` carries (throws when it carries none: the exec itself failed). */
export function exitCodeOf(status: V1Status, what: string): number {
  if (status.status === 'Success') return 0;
  const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
  if (status.reason === 'NonZeroExitCode' && cause?.message !== undefined) {
    const code = Number(cause.message);
    if (Number.isInteger(code)) return code;
  }
  throw new SandboxError(`${what}: ${status.message ?? JSON.stringify(status)}`, {
    code: 'exec_failed',
    data: { status },
  });
}

function sink(write: (chunk: Buffer) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      write(chunk);
      done();
    },
  });
}

/** The handshake's failure (the client gives the `ws` error): a 429 is typed, the rest a `SandboxError`. */
function handshakeError(what: string, error: unknown): Error {
  const inner = (error as { error?: unknown } | undefined)?.error ?? error;
  const message =
    inner instanceof Error ? inner.message : String((inner as { message?: unknown })?.message ?? inner);
  if (/Unexpected server response: 429/.test(message)) {
    // The client's WebSocket does not hand the handshake's headers on: the wait is unknown here.
    return new KubernetesRateLimitError(`${what}: the API server is rate limiting (429)`, { cause: inner });
  }
  return new SandboxError(`${what}: ${message}`, { cause: inner, code: 'exec_failed' });
}

/**
 * Run `argv` in the pod's container and wait for its status. `stdin`, when given, is sent and then
 * closed. An abort closes the connection (the command may go on in the pod: the caller kills it there).
 */
export async function podExec(
  kc: KubeConfig,
  target: { namespace: string; pod: string; container: string },
  argv: readonly string[],
  sinks: ExecSinks,
  options: { stdin?: Uint8Array | Readable | undefined; signal?: AbortSignal | undefined } = {},
): Promise<PodExecResult> {
  const what = `exec in pod ${target.namespace}/${target.pod}`;
  options.signal?.throwIfAborted();
  let status: V1Status | undefined;
  const stdin =
    options.stdin === undefined
      ? null
      : options.stdin instanceof Readable
        ? options.stdin
        : Readable.from([Buffer.from(options.stdin)]);
  let ws: Awaited<ReturnType<Exec['exec']>>;
  try {
    ws = await new Exec(kc).exec(
      target.namespace,
      target.pod,
      target.container,
      [...argv],
      sink(sinks.stdout),
      sink(sinks.stderr),
      stdin,
      false,
      (s) => {
        status = s;
      },
    );
  } catch (error) {
    throw handshakeError(what, error);
  }
  await new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      ws.close();
      reject(options.signal?.reason);
    };
    if (options.signal?.aborted) return onAbort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    ws.addEventListener('close', () => {
      options.signal?.removeEventListener('abort', onAbort);
      resolve();
    });
  });
  if (!status) {
    throw new SandboxError(`${what}: the connection closed before the command's exit status came`, {
      code: 'exec_failed',
    });
  }
  return { exitCode: exitCodeOf(status, what) };
}
