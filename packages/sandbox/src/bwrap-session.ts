/**
 * A long-lived bubblewrap session: one `bwrap` per sandbox runs a small supervisor (Python, from the
 * sandbox's own /usr) that forks each command inside the already-built namespaces. An exec then costs a
 * fork instead of building namespaces and mounts again, which is what makes bubblewrap as cheap as a plain
 * spawn. Frames on a socket at the supervisor's fd 3 carry requests, output and exit statuses:
 * `[op: u8][exec id: u32 BE][length: u32 BE][payload]`. Nothing a command can reach holds that socket:
 * bwrap's init gets only /dev/null and a diagnostics stderr, and the supervisor is not dumpable.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import type { Duplex, Readable } from 'node:stream';
import { SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, tailOf } from './output.js';
import { killByExecMarker } from './proc.js';
import type { RunResult } from './process.js';

const OP = { run: 1, stdin: 2, eof: 3, kill: 4 } as const;
const OUT = { stdout: 1, stderr: 2, exit: 3, ready: 9 } as const;

/** The supervisor. Kept dependency-free and small; it only forks, pipes and reaps. */
export const SUPERVISOR = String.raw`
import ctypes, json, os, queue, resource, selectors, signal, struct, sys, threading, time
# The channel to the host is fd 3, which bwrap's init does not keep. Not dumpable, so commands (same
# uid) cannot ptrace us or open our fds and forge frames; not inherited by the commands either.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
CH = 3
os.set_inheritable(CH, False)
LIMITS = json.loads(sys.argv[1])
RL = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE, "as": resource.RLIMIT_AS}
wlock = threading.Lock()
def send(op, xid, payload=b""):
    data = memoryview(struct.pack(">BII", op, xid, len(payload)) + payload)
    with wlock:
        while data:
            data = data[os.write(CH, data):]
sel = selectors.DefaultSelector()
execs, bypid = {}, {}
def feeder(fd, q):
    try:
        while True:
            chunk = q.get()
            if chunk is None:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
    except OSError:
        pass
    finally:
        os.close(fd)
def start(xid, req):
    r_in, w_in = os.pipe(); r_out, w_out = os.pipe(); r_err, w_err = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(r_in, 0); os.dup2(w_out, 1); os.dup2(w_err, 2)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            for name, value in LIMITS.items():
                resource.setrlimit(RL[name], (value, value))
            os.chdir(req["cwd"])
            os.execvpe(req["argv"][0], req["argv"], req["env"])
        except FileNotFoundError as e:
            msg = "%s: command not found\n" % req["argv"][0] if e.filename != req["cwd"] else "cd: %s: No such file or directory\n" % req["cwd"]
            os.write(2, msg.encode()); os._exit(127 if e.filename != req["cwd"] else 126)
        except BaseException as e:
            os.write(2, ("%s: %s\n" % (req["argv"][0], e)).encode()); os._exit(126)
    os.close(r_in); os.close(w_out); os.close(w_err)
    q = queue.Queue()
    threading.Thread(target=feeder, args=(w_in, q), daemon=True).start()
    if not req.get("stdin"):
        q.put(None)
    execs[xid] = {"pid": pid, "open": 2, "status": None, "grace": None, "q": q, "fds": [r_out, r_err]}
    bypid[pid] = xid
    for fd, stream in ((r_out, 1), (r_err, 2)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, (xid, stream))
def finish(xid, force=False):
    e = execs.get(xid)
    if e is None or e["status"] is None or (e["open"] > 0 and not force):
        return
    for fd in e["fds"]:
        try:
            sel.unregister(fd); os.close(fd)
        except (KeyError, ValueError, OSError):
            pass
    s = e["status"]
    code = os.WEXITSTATUS(s) if os.WIFEXITED(s) else -os.WTERMSIG(s)
    send(3, xid, struct.pack(">i", code))
    del execs[xid]
def kill(marker):
    needle = ("VIME_EXEC_ID=%s\0" % marker).encode()
    for _ in range(3):
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % p, "rb") as f:
                    if needle in f.read():
                        os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        xid = bypid.pop(pid, None)
        if xid is not None and xid in execs:
            execs[xid]["status"] = status
            execs[xid]["grace"] = time.monotonic() + 0.25
            finish(xid)
rsig, wsig = os.pipe()
os.set_blocking(wsig, False)
signal.set_wakeup_fd(wsig)
signal.signal(signal.SIGCHLD, lambda *a: None)
sel.register(rsig, selectors.EVENT_READ, "sig")
sel.register(CH, selectors.EVENT_READ, "ctl")
buf = b""
send(9, 0)
while True:
    graces = [e["grace"] for e in execs.values() if e["grace"] is not None]
    timeout = max(0, min(graces) - time.monotonic()) if graces else None
    for key, _ in sel.select(timeout):
        if key.data == "sig":
            os.read(rsig, 4096)
            reap()
        elif key.data == "ctl":
            data = os.read(CH, 1 << 16)
            if not data:
                sys.exit(0)
            buf += data
            while len(buf) >= 9:
                op, xid, n = struct.unpack(">BII", buf[:9])
                if len(buf) < 9 + n:
                    break
                payload, buf = buf[9:9 + n], buf[9 + n:]
                if op == 1:
                    start(xid, json.loads(payload))
                elif op in (2, 3) and xid in execs:
                    execs[xid]["q"].put(payload if op == 2 else None)
                elif op == 4:
                    if xid in execs:
                        try:
                            os.killpg(execs[xid]["pid"], signal.SIGKILL)
                        except OSError:
                            pass
                    kill(payload.decode())
        else:
            xid, stream = key.data
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                send(stream, xid, chunk)
            else:
                sel.unregister(key.fd); os.close(key.fd)
                e = execs[xid]
                e["fds"].remove(key.fd)
                e["open"] -= 1
                finish(xid)
    now = time.monotonic()
    for xid in [x for x, e in execs.items() if e["grace"] is not None and now >= e["grace"]]:
        finish(xid, force=True)
`;

interface Pending {
  stdout: BoundedOutput;
  stderr: BoundedOutput;
  merged: BoundedOutput;
  raw: Buffer[] | undefined;
  resolve: (code: number) => void;
  reject: (error: unknown) => void;
}

export interface SessionRun {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  marker: string;
  stdin?: string | Uint8Array | Readable;
  timeoutMs?: number;
  signal?: AbortSignal;
  maxOutputBytes?: number;
  raw: boolean;
}

function frame(op: number, id: number, payload: Uint8Array = new Uint8Array()): Buffer {
  const header = Buffer.alloc(9);
  header.writeUInt8(op, 0);
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

export class BwrapSession {
  private readonly child: ChildProcess;
  private readonly channel: Duplex;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffer: Buffer = Buffer.alloc(0);
  private stderrTail = '';
  private exited: Error | undefined;
  readonly ready: Promise<void>;
  readonly pid: number | undefined;

  constructor(launch: {
    command: string;
    args: string[];
    uid?: number;
    gid?: number;
    env: Record<string, string>;
  }) {
    this.child = spawn(launch.command, launch.args, {
      env: launch.env,
      stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
      detached: true,
      ...(launch.uid === undefined ? {} : { uid: launch.uid, gid: launch.gid! }),
    });
    this.pid = this.child.pid;
    let markReady: () => void = () => {};
    let failReady: (e: unknown) => void = () => {};
    this.ready = new Promise<void>((resolve, reject) => {
      markReady = resolve;
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
      for (const p of this.pending.values()) p.reject(this.exited);
      this.pending.clear();
    };
    this.child.once('error', (e) => onGone(e.message));
    this.child.once('exit', (code, signal) => onGone(`exit ${code ?? signal}`));
  }

  get alive(): boolean {
    return this.exited === undefined;
  }

  private onData(chunk: Buffer, markReady: () => void): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    while (this.buffer.length >= 9) {
      const op = this.buffer.readUInt8(0);
      const id = this.buffer.readUInt32BE(1);
      const n = this.buffer.readUInt32BE(5);
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
        if (p.raw) p.raw.push(Buffer.from(payload));
        else p.stdout.push(payload);
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
    const max = req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const started = performance.now();
    let timedOut = false;
    let aborted = false;
    const kill = () => {
      this.write(frame(OP.kill, id, Buffer.from(req.marker)));
      // Also from the host, which sees the sandbox's processes too.
      killByExecMarker(req.marker);
    };
    const pending: Pending = {
      stdout: new BoundedOutput(max),
      stderr: new BoundedOutput(max),
      merged: new BoundedOutput(max),
      raw: req.raw ? [] : undefined,
      resolve: () => {},
      reject: () => {},
    };
    const done = new Promise<number>((resolve, reject) => {
      pending.resolve = resolve;
      pending.reject = reject;
    });
    this.pending.set(id, pending);
    const timer =
      req.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            kill();
          }, req.timeoutMs);
    const onAbort = () => {
      aborted = true;
      kill();
    };
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const hasStdin = req.stdin !== undefined;
    this.write(
      frame(
        OP.run,
        id,
        Buffer.from(JSON.stringify({ argv: req.argv, env: req.env, cwd: req.cwd, stdin: hasStdin })),
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
      if (aborted) throw req.signal?.reason;
      const result: RunResult = {
        // Killed by a signal: report it the way a shell does (128 + signal), as docker does.
        exitCode: timedOut ? null : code >= 0 ? code : 128 - code,
        signal: null,
        stdout: pending.stdout.text(),
        stderr: pending.stderr.text(),
        output: pending.merged.text(),
        timedOut,
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
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
