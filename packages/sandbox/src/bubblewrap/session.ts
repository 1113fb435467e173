/**
 * A long-lived bubblewrap session: one `bwrap` per sandbox runs a small supervisor (supervisor.ts)
 * that forks each command inside the already-built namespaces. An exec then costs a fork instead of
 * building namespaces and mounts again, which is what makes bubblewrap as cheap as a plain spawn.
 *
 * Timeouts and aborts are enforced from outside the sandbox, whatever a command does to its environment,
 * process group or supervisor: each command runs in a cgroup of its own that the host kills whole; where
 * no cgroup is writable, the whole session is killed (the next command starts a new one). A stopped
 * supervisor is continued before every command and after a kill, and one that still does not answer is
 * killed with its session, so no exec outlasts its timeout.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Duplex, Readable } from 'node:stream';
import { SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, sleep } from '@vime/core/utils';
import { closeFd, type ExecCgroups } from '../host/cgroups.js';
import type { RunResult } from '../host/run-process.js';
import { tailOf } from '../output.js';

const OP = { run: 1, stdin: 2, eof: 3, kill: 4, spare: 5 } as const;
const OUT = { stdout: 1, stderr: 2, exit: 3, ready: 9 } as const;
/** The supervisor sends chunks of at most 64 KiB; anything larger is not a frame of ours. */
const MAX_FRAME = 1 << 20;
/** How long a killed exec's supervisor has to report the exit before the session is killed instead. */
const EXIT_GRACE_MS = 2000;
/** Exit status given to the execs of a session that ended under them. */
const SESSION_GONE = Symbol('session gone');

interface Pending {
  stdout: BoundedOutput;
  stderr: BoundedOutput;
  merged: BoundedOutput;
  raw: Buffer[] | undefined;
  rawBytes: number;
  maxRawBytes: number;
  onOverflow: () => void;
  resolve: (code: number | typeof SESSION_GONE) => void;
}

export interface SessionRun {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  stdin?: string | Uint8Array | Readable | undefined;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  maxOutputBytes?: number | undefined;
  /** Keep stdout as raw bytes, at most this many (file reads): more fails with `file_too_large`. */
  maxRawBytes?: number | undefined;
}

export interface SessionLaunch {
  command: string;
  args: string[];
  uid?: number | undefined;
  gid?: number | undefined;
  env: Record<string, string>;
}

function frame(op: number, id: number, payload: Uint8Array = new Uint8Array()): Buffer {
  const header = Buffer.alloc(9);
  header.writeUInt8(op, 0);
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

export class BwrapSession {
  private readonly child: ChildProcess;
  private readonly channel: Duplex;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffer: Buffer = Buffer.alloc(0);
  private stderrTail = '';
  private exited: Error | undefined;
  /** Set by `close()`: the session is being killed, though its exit may not have been seen yet. */
  private closed = false;
  /** Resolves once the session's bwrap process has exited. */
  readonly gone: Promise<void>;
  /** bwrap, its init and the supervisor (host pids), found once the session is ready. */
  private own: number[] = [];
  /** The exec cgroup a spare child of the supervisor already waits in, for the next command. */
  private spare: string | undefined;
  private nextCgroup = 1;
  readonly ready: Promise<void>;
  readonly pid: number | undefined;

  constructor(
    launch: SessionLaunch,
    private readonly cgroups: ExecCgroups | undefined,
  ) {
    const dirFd = cgroups?.openDir();
    try {
      this.child = spawn(launch.command, launch.args, {
        env: launch.env,
        stdio: ['ignore', 'ignore', 'pipe', 'pipe', ...(dirFd === undefined ? [] : [dirFd])],
        detached: true,
        uid: launch.uid,
        gid: launch.gid,
      });
    } finally {
      if (dirFd !== undefined) closeFd(dirFd);
    }
    this.pid = this.child.pid;
    let markReady: () => void = () => {};
    let failReady: (e: unknown) => void = () => {};
    this.ready = new Promise<void>((resolve, reject) => {
      markReady = () => {
        this.own = this.findOwn();
        this.refillSpare();
        resolve();
      };
      failReady = reject;
    });
    this.ready.catch(() => {});
    this.channel = this.child.stdio[3] as Duplex;
    this.channel.on('data', (chunk: Buffer) => this.onData(chunk, markReady));
    this.channel.on('error', () => {});
    this.child.stderr!.on('data', (chunk: Buffer) => {
      this.stderrTail = tailOf(this.stderrTail + chunk.toString(), 4000);
    });
    const onGone = (reason: string) => {
      if (this.exited) return;
      this.exited = new SandboxError(
        `the bubblewrap session ended (${reason})${this.stderrTail ? `: ${this.stderrTail.trim()}` : ''}`,
        { code: 'sandbox_session_ended' },
      );
      failReady(this.exited);
      for (const p of this.pending.values()) p.resolve(SESSION_GONE);
      this.pending.clear();
    };
    this.child.once('error', (e) => onGone(e.message));
    this.gone = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        onGone(`exit ${code ?? signal}`);
        resolve();
      });
    });
  }

  /**
   * False as soon as the session is killed: a command's timeout can be answered before the kill's exit
   * is seen, and a command sent in between would land in the dying session.
   */
  get alive(): boolean {
    return this.exited === undefined && !this.closed;
  }

  private endReason(): string {
    return this.exited?.message ?? 'killed';
  }

  /** bwrap → its init → the supervisor, the process chain a command could stop. */
  private findOwn(): number[] {
    if (this.pid === undefined) return [];
    const init = childrenOf(this.pid);
    return [this.pid, ...init, ...init.flatMap(childrenOf)];
  }

  /** A new exec cgroup, created by the host (throws when it cannot be). */
  private newCgroup(): string {
    const name = `x${this.nextCgroup++}`;
    this.cgroups!.create(name);
    return name;
  }

  /** Have the supervisor fork the next command's child ahead of time, already in its cgroup. */
  private refillSpare(): void {
    if (!this.cgroups || this.spare || this.exited) return;
    try {
      this.spare = this.newCgroup();
    } catch {
      return; // the next command creates its cgroup itself
    }
    this.write(frame(OP.spare, 0, Buffer.from(this.spare)));
  }

  /** Continue the session's own processes (a command may have stopped its supervisor). */
  private resume(): void {
    for (const pid of this.own) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // gone
      }
    }
  }

  private onData(chunk: Buffer, markReady: () => void): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    while (this.buffer.length >= 9) {
      const op = this.buffer.readUInt8(0);
      const id = this.buffer.readUInt32BE(1);
      const n = this.buffer.readUInt32BE(5);
      if (n > MAX_FRAME) {
        this.stderrTail += `\nprotocol error: a frame of ${n} bytes`;
        this.close();
        return;
      }
      if (this.buffer.length < 9 + n) break;
      const payload = this.buffer.subarray(9, 9 + n);
      this.buffer = this.buffer.subarray(9 + n);
      if (op === OUT.ready) {
        markReady();
        continue;
      }
      const p = this.pending.get(id);
      if (!p) continue;
      if (op === OUT.stdout) {
        if (p.raw) {
          p.rawBytes += payload.length;
          if (p.rawBytes > p.maxRawBytes) p.onOverflow();
          else p.raw.push(Buffer.from(payload));
        } else p.stdout.push(payload);
        p.merged.push(payload);
      } else if (op === OUT.stderr) {
        p.stderr.push(payload);
        p.merged.push(payload);
      } else if (op === OUT.exit) {
        this.pending.delete(id);
        p.resolve(payload.readInt32BE(0));
      }
    }
  }

  private write(data: Buffer): void {
    if (!this.exited) this.channel.write(data);
  }

  async run(req: SessionRun): Promise<RunResult> {
    if (this.exited) throw this.exited;
    req.signal?.throwIfAborted();
    const id = this.nextId++;
    let cg: string | undefined;
    if (this.cgroups) {
      try {
        cg = this.spare ?? this.newCgroup();
      } catch (error) {
        throw new SandboxError(`cannot create the cgroup of a command: ${(error as Error).message}`, {
          cause: error,
        });
      }
      this.spare = undefined;
    }
    const max = req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const started = performance.now();
    let why: 'timeout' | 'abort' | 'overflow' | undefined;
    let resolveDone: (code: number | typeof SESSION_GONE) => void = () => {};
    const done = new Promise<number | typeof SESSION_GONE>((resolve) => {
      resolveDone = resolve;
    });
    let enforcing: Promise<void> | undefined;
    // Kill every process of this exec from outside the sandbox, and make sure the exec ends.
    const enforce = (reason: NonNullable<typeof why>) => {
      why ??= reason;
      enforcing ??= (async () => {
        this.write(frame(OP.kill, id));
        if (!cg) return this.close();
        await this.cgroups!.kill(cg).catch(() => this.close());
        this.resume();
        const answered = await Promise.race([done.then(() => true), sleep(EXIT_GRACE_MS).then(() => false)]);
        if (!answered) this.close();
      })();
    };
    const pending: Pending = {
      stdout: new BoundedOutput(max),
      stderr: new BoundedOutput(max),
      merged: new BoundedOutput(max),
      raw: req.maxRawBytes === undefined ? undefined : [],
      rawBytes: 0,
      maxRawBytes: req.maxRawBytes ?? 0,
      onOverflow: () => enforce('overflow'),
      resolve: resolveDone,
    };
    this.pending.set(id, pending);
    const timer =
      req.timeoutMs === undefined ? undefined : setTimeout(() => enforce('timeout'), req.timeoutMs);
    const onAbort = () => enforce('abort');
    req.signal?.addEventListener('abort', onAbort, { once: true });
    this.resume();
    const hasStdin = req.stdin !== undefined;
    this.write(
      frame(
        OP.run,
        id,
        Buffer.from(JSON.stringify({ argv: req.argv, env: req.env, cwd: req.cwd, stdin: hasStdin, cg })),
      ),
    );
    const input = req.stdin;
    if (typeof input === 'string' || input instanceof Uint8Array) {
      const bytes = typeof input === 'string' ? Buffer.from(input) : input;
      for (let i = 0; i < bytes.length; i += 1 << 16)
        this.write(frame(OP.stdin, id, bytes.subarray(i, i + (1 << 16))));
      this.write(frame(OP.eof, id));
    } else if (input) {
      (async () => {
        for await (const chunk of input) this.write(frame(OP.stdin, id, chunk as Buffer));
        this.write(frame(OP.eof, id));
      })().catch(() => this.write(frame(OP.eof, id)));
    }
    try {
      const code = await done;
      if (timer) clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
      await enforcing;
      if (cg) {
        // Whatever a killed exec left (it may have forked while being killed) goes too.
        if (why) await this.cgroups!.kill(cg).catch(() => {});
        this.cgroups!.release(cg);
        // The next command's child is forked now, not while this one's output is being relayed.
        this.refillSpare();
      }
      if (why === 'abort') throw req.signal?.reason;
      if (why === 'overflow') {
        throw new SandboxError(`output larger than ${req.maxRawBytes} bytes`, {
          code: 'file_too_large',
          data: { maxBytes: req.maxRawBytes },
        });
      }
      let stderr = pending.stderr.text();
      let output = pending.merged.text();
      if (code === SESSION_GONE && !why) {
        // Something in the sandbox ended its session (a command killed its supervisor, or the OOM killer
        // did): the command is reported killed, as the kernel would report it.
        const note = `\n[the sandbox's session ended during this command (${this.endReason()}); the next command starts a new one]\n`;
        stderr += note;
        output += note;
      }
      const result: RunResult = {
        // Killed by a signal: report it the way a shell does (128 + signal), as docker does.
        exitCode: why === 'timeout' ? null : code === SESSION_GONE ? 137 : code >= 0 ? code : 128 - code,
        signal: null,
        stdout: pending.stdout.text(),
        stderr,
        output,
        timedOut: why === 'timeout',
        truncated: pending.stdout.truncated || pending.stderr.truncated || pending.merged.truncated,
        durationMs: performance.now() - started,
      };
      if (pending.raw) result.raw = Buffer.concat(pending.raw);
      return result;
    } finally {
      if (timer) clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
      this.pending.delete(id);
    }
  }

  /** Kill the session: bwrap's death takes its pid namespace, and every process in it, along. */
  close(): void {
    this.closed = true;
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
