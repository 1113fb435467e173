/**
 * A Vime sandbox as the AI SDK's sandbox session (`experimental_sandbox`): the tools of an AI SDK agent
 * run their commands and file operations inside the rollout's sandbox, never on the host.
 */
import { posix } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import type { ExecResult, Sandbox } from '@vime/sandbox';
import type {
  Experimental_SandboxDirectoryEntry as SandboxDirectoryEntry,
  Experimental_SandboxFileStat as SandboxFileStat,
  Experimental_SandboxProcess as SandboxProcess,
  Experimental_SandboxSession as SandboxSession,
} from 'ai';

/** Options of `aiSandbox`. */
export interface AiSandboxOptions {
  /** What the agent is told about its sandbox (default: the work dir and that the network is closed). */
  description?: string | undefined;
  /** Timeout of one command (default 60 s, as `sweRollout`'s); a command past it exits 124. */
  commandTimeoutMs?: number | undefined;
  /** Called with each command the agent runs and each file it writes or deletes (the rollout's transcript). */
  onAction?: ((action: string) => void) | undefined;
}

/** Exit code of a command killed at its timeout (as coreutils' `timeout` reports it). */
export const COMMAND_TIMEOUT_EXIT = 124;

// Shell snippets for the path queries: `$1` is the path, never spliced into the script, so no file name
// (quotes, newlines, leading dashes) can change what runs. Exit 3: no such path; exit 4: wrong kind.
const STAT = 'if [ ! -e "$1" ]; then exit 3; fi; stat -L -c "%F" -- "$1"; stat -L -c "%s" -- "$1"';
const LIST =
  'if [ ! -e "$1" ]; then exit 3; fi; if [ ! -d "$1" ]; then exit 4; fi; find -H "$1" -mindepth 1 -maxdepth 1 -printf "%y\\t%f\\0"';
const DELETE =
  'if [ -d "$1" ] && [ ! -L "$1" ]; then exit 4; fi; if [ ! -e "$1" ] && [ ! -L "$1" ]; then exit 3; fi; rm -f -- "$1"';

const ENTRY_TYPES: Readonly<Record<string, SandboxDirectoryEntry['type']>> = {
  f: 'file',
  d: 'directory',
  l: 'symlink',
};

/**
 * The AI SDK sandbox session over a Vime sandbox: relative paths resolve against the sandbox's work dir,
 * commands run under `sh -c` with the sandbox's limits. `spawn` runs the command to its end before its
 * streams yield (a Vime sandbox returns a command's output when it exits); writable stdin is refused.
 */
export function aiSandbox(sandbox: Sandbox, options: AiSandboxOptions = {}): SandboxSession {
  return new VimeSandboxSession(sandbox, options);
}

class VimeSandboxSession implements SandboxSession {
  readonly description: string;
  readonly #timeoutMs: number;

  constructor(
    private readonly sandbox: Sandbox,
    private readonly options: AiSandboxOptions,
  ) {
    this.description =
      options.description ??
      `A Linux sandbox. The repository is at ${sandbox.workdir} (the working directory of every command). ${
        sandbox.capabilities.isolatedNetwork ? 'It has no network access.' : ''
      }`.trim();
    this.#timeoutMs = options.commandTimeoutMs ?? 60_000;
  }

  #path(path: string): string {
    if (typeof path !== 'string' || path === '') {
      throw new ConfigError(`sandbox path: ${JSON.stringify(path)} is not a path; pass a file path`);
    }
    return posix.resolve(this.sandbox.workdir, path);
  }

  /** A path query as `sh -c SCRIPT sh PATH`: the path is an argument, never shell text. */
  #query(script: string, path: string, signal: AbortSignal | undefined): Promise<ExecResult> {
    return this.sandbox.exec(['sh', '-c', script, 'sh', path], { signal, timeoutMs: this.#timeoutMs });
  }

  #failed(what: string, path: string, r: ExecResult): never {
    throw new SandboxError(
      `${what} ${path}: exit ${r.exitCode}${r.timedOut ? ' (timed out)' : ''}: ${r.stderr.trim().slice(0, 500)}`,
    );
  }

  stat = async ({ path, abortSignal }: { path: string; abortSignal?: AbortSignal }) => {
    const abs = this.#path(path);
    const r = await this.#query(STAT, abs, abortSignal);
    if (r.exitCode === 3) return null;
    if (r.exitCode !== 0) this.#failed('stat', abs, r);
    const [kind = '', size = '0'] = r.stdout.trim().split('\n');
    const type: SandboxFileStat['type'] = kind.startsWith('regular')
      ? 'file'
      : kind === 'directory'
        ? 'directory'
        : 'other';
    return { type, size: Number(size) };
  };

  listDirectory = async ({ path, abortSignal }: { path: string; abortSignal?: AbortSignal }) => {
    const abs = this.#path(path);
    const r = await this.#query(LIST, abs, abortSignal);
    if (r.exitCode === 3) return null;
    if (r.exitCode === 4) throw new SandboxError(`listDirectory ${abs}: not a directory`);
    if (r.exitCode !== 0) this.#failed('listDirectory', abs, r);
    return r.stdout
      .split('\0')
      .filter((line) => line !== '')
      .map((line): SandboxDirectoryEntry => {
        const tab = line.indexOf('\t');
        return { name: line.slice(tab + 1), type: ENTRY_TYPES[line.slice(0, tab)] ?? 'other' };
      });
  };

  deleteFile = async ({ path, abortSignal }: { path: string; abortSignal?: AbortSignal }) => {
    const abs = this.#path(path);
    this.options.onAction?.(`rm ${abs}`);
    const r = await this.#query(DELETE, abs, abortSignal);
    if (r.exitCode === 3) return false;
    if (r.exitCode === 4) throw new SandboxError(`deleteFile ${abs}: a directory, not a file`);
    if (r.exitCode !== 0) this.#failed('deleteFile', abs, r);
    return true;
  };

  readBinaryFile = async ({ path, abortSignal }: { path: string; abortSignal?: AbortSignal }) => {
    const abs = this.#path(path);
    const stat = await this.stat({ path: abs, ...(abortSignal ? { abortSignal } : {}) });
    if (stat === null) return null;
    if (stat.type === 'directory') throw new SandboxError(`readFile ${abs}: a directory`);
    return this.sandbox.readFile(abs, { signal: abortSignal });
  };

  readFile = async (options: { path: string; abortSignal?: AbortSignal }) => {
    const bytes = await this.readBinaryFile(options);
    return bytes === null ? null : streamOf(bytes);
  };

  readTextFile = async (options: {
    path: string;
    abortSignal?: AbortSignal;
    encoding?: string;
    startLine?: number;
    endLine?: number;
  }) => {
    const bytes = await this.readBinaryFile(options);
    if (bytes === null) return null;
    const text = new TextDecoder(options.encoding ?? 'utf-8').decode(bytes);
    if (options.startLine === undefined && options.endLine === undefined) return text;
    // Lines keep their newline, so a range reads back exactly as the file holds it.
    const lines = text.split(/(?<=\n)/);
    return lines.slice(Math.max(0, (options.startLine ?? 1) - 1), options.endLine ?? lines.length).join('');
  };

  writeBinaryFile = async ({
    path,
    content,
    abortSignal,
  }: {
    path: string;
    content: Uint8Array;
    abortSignal?: AbortSignal;
  }) => {
    const abs = this.#path(path);
    this.options.onAction?.(`write ${abs}`);
    await this.sandbox.writeFile(abs, content, { signal: abortSignal });
  };

  writeTextFile = async (options: {
    path: string;
    content: string;
    abortSignal?: AbortSignal;
    encoding?: string;
  }) => {
    const encoding = (options.encoding ?? 'utf-8').toLowerCase();
    if (encoding !== 'utf-8' && encoding !== 'utf8') {
      throw new ConfigError(
        `writeTextFile: encoding ${JSON.stringify(options.encoding)} is not supported; pass utf-8, or bytes to writeBinaryFile`,
      );
    }
    await this.writeBinaryFile({ ...options, content: new TextEncoder().encode(options.content) });
  };

  writeFile = async (options: {
    path: string;
    content: ReadableStream<Uint8Array>;
    abortSignal?: AbortSignal;
  }) => {
    const content = new Uint8Array(await new Response(options.content).arrayBuffer());
    await this.writeBinaryFile({ ...options, content });
  };

  run = async (options: RunOptions) => {
    const r = await this.#exec(options, options.abortSignal);
    return { exitCode: exitCodeOf(r), stdout: r.stdout, stderr: timeoutNote(r, this.#timeoutMs) };
  };

  spawn = ((options: RunOptions & { stdin?: boolean }): PromiseLike<SandboxProcess> => {
    if (options.stdin === true) {
      return Promise.reject(
        new ConfigError(
          "spawn: a Vime sandbox takes a command's stdin up front, not as a stream; leave `stdin` out (or false)",
        ),
      );
    }
    const stop = new AbortController();
    const signal = options.abortSignal ? AbortSignal.any([options.abortSignal, stop.signal]) : stop.signal;
    const done = this.#exec(options, signal);
    return Promise.resolve(spawnedProcess(done, stop, this.#timeoutMs));
  }) as SandboxSession['spawn'];

  #exec(options: RunOptions, signal: AbortSignal | undefined): Promise<ExecResult> {
    if (typeof options.command !== 'string' || options.command.trim() === '') {
      throw new ConfigError(`run: command ${JSON.stringify(options.command)} is empty; pass a shell command`);
    }
    this.options.onAction?.(options.command);
    return this.sandbox.exec(options.command, {
      cwd: options.workingDirectory === undefined ? undefined : this.#path(options.workingDirectory),
      env: options.env,
      signal,
      timeoutMs: this.#timeoutMs,
    });
  }
}

/** The options `run` and `spawn` share. */
interface RunOptions {
  command: string;
  workingDirectory?: string;
  env?: Record<string, string>;
  abortSignal?: AbortSignal;
}

const exitCodeOf = (r: ExecResult) => r.exitCode ?? COMMAND_TIMEOUT_EXIT;

/** A timed-out command's stderr says so, so the agent (and a reader of the transcript) sees why it ended. */
const timeoutNote = (r: ExecResult, timeoutMs: number) =>
  r.timedOut ? `${r.stderr}\n[killed at the command timeout of ${timeoutMs} ms]\n` : r.stderr;

function streamOf(bytes: Uint8Array): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      if (bytes.length > 0) controller.enqueue(bytes);
      controller.close();
    },
  });
}

/** A stream that yields `text` once the command is done (or errors with the command's failure). */
function laterStream(done: Promise<string>): ReadableStream<Uint8Array> {
  return new ReadableStream({
    async start(controller) {
      try {
        const text = await done;
        if (text !== '') controller.enqueue(new TextEncoder().encode(text));
        controller.close();
      } catch (error) {
        controller.error(error);
      }
    },
  });
}

function spawnedProcess(done: Promise<ExecResult>, stop: AbortController, timeoutMs: number): SandboxProcess {
  // The streams carry the failure; wait() reports it too, so an unread stream leaves no unhandled rejection.
  done.catch(() => {});
  return {
    stdout: laterStream(done.then((r) => r.stdout)),
    stderr: laterStream(done.then((r) => timeoutNote(r, timeoutMs))),
    wait: () => done.then((r) => ({ exitCode: exitCodeOf(r) })),
    kill: async () => {
      stop.abort(new Error('killed'));
      await done.catch(() => {});
    },
  };
}
