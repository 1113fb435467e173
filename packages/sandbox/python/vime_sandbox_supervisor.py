# The in-namespace supervisor of a bubblewrap session, run as `python3 -c <this file> <rlimits> <cgroup fd>` by
# the sandbox's own python3: it forks each command inside the namespaces bwrap built once, pipes its input
# and output over fd 3 and reports its exit status. Standard library only, single-threaded (a fork bomb
# cannot starve it of threads) and small. A fork refused for want of a process is retried, then fails that
# command only (exit 126): a command filling the pids limit never ends the session.
#
# Frames: `[op: u8][exec id: u32 BE][length: u32 BE][payload]`.
# Host -> supervisor: 1 run (JSON `{argv, env, cwd, stdin, cg}`), 2 stdin bytes, 3 stdin end, 4 kill,
# 5 spare (a cgroup name: fork a child that moves into it and waits for the next command).
# Supervisor -> host: 1 stdout, 2 stderr, 3 exit (i32 BE: the code, or minus the signal), 9 ready.
#
# `argv[1]`: the rlimits of every command (JSON); `argv[2]`: the fd of the sandbox's exec-cgroup folder, or
# empty. A command's child joins the cgroup `cg` (created by the host) before it execs, so everything it
# starts can be killed from outside the sandbox; a spare child joins it ahead of time. Nothing a command can
# reach holds fd 3 or that folder: bwrap's init closes them, commands do not inherit them, and the
# supervisor is not dumpable (prctl PR_SET_DUMPABLE 0: no ptrace, no `/proc/<pid>/fd`).
import ctypes
import errno
import json
import os
import resource
import selectors
import signal
import struct
import sys
import time

# Not dumpable (PR_SET_DUMPABLE 0): no command can ptrace it or read its /proc/<pid>/fd.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
CH = 3
os.set_inheritable(CH, False)
LIMITS = json.loads(sys.argv[1])
CGDIR = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
if CGDIR is not None:
    os.set_inheritable(CGDIR, False)
RL = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE, "as": resource.RLIMIT_AS,
      "nofile": resource.RLIMIT_NOFILE, "data": resource.RLIMIT_DATA, "nproc": resource.RLIMIT_NPROC}


def send(op, xid, payload=b""):
    data = memoryview(struct.pack(">BII", op, xid, len(payload)) + payload)
    while data:
        data = data[os.write(CH, data):]


sel = selectors.DefaultSelector()
execs, bypid = {}, {}


def join(cg):
    # Into the exec's cgroup before anything else: whatever the command starts is inside it.
    if cg:
        fd = os.open(cg + "/cgroup.procs", os.O_WRONLY, dir_fd=CGDIR)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def run_command(req, r_in, w_out, w_err):
    try:
        os.setsid()
        os.dup2(r_in, 0)
        os.dup2(w_out, 1)
        os.dup2(w_err, 2)
        for s in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(s, signal.SIG_DFL)
        for name, value in LIMITS.items():
            resource.setrlimit(RL[name], (value, value))
        os.chdir(req["cwd"])
        os.execvpe(req["argv"][0], req["argv"], req["env"])
    except FileNotFoundError as e:
        cwd = e.filename == req["cwd"]
        msg = "cd: %s: No such file or directory\n" % req["cwd"] if cwd else "%s: command not found\n" % req["argv"][0]
        os.write(2, msg.encode())
        os._exit(126 if cwd else 127)
    except BaseException as e:
        os.write(w_err, ("%s: %s\n" % (req["argv"][0], e)).encode())
        os._exit(126)


def pipes():
    fds = []
    try:
        for _ in range(3):
            fds += list(os.pipe())
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


# A spare child waits, already in the next exec's cgroup, for its command: moving a process between
# cgroups can wait for an RCU grace period (milliseconds), which a spare pays ahead of time.
spare = None


def make_spare(cg):
    global spare
    try:
        fds = pipes()
        req_r, req_w = os.pipe()
        fds += [req_r, req_w]
        pid = os.fork()
    except OSError:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        return
    r_in, w_in, r_out, w_out, r_err, w_err = fds[:6]
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        keep = {r_in, w_out, w_err, req_r, CGDIR}
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        try:
            join(cg)
            failure = None
        except OSError as e:
            failure = e
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = os.read(req_r, 1 << 16)
            if not chunk:
                os._exit(0)
            data += chunk
        req = json.loads(data[4:])
        if failure is not None:
            os.write(w_err, ("cannot join the command's cgroup: %s\n" % failure).encode())
            os._exit(126)
        run_command(req, r_in, w_out, w_err)
    for fd in (r_in, w_out, w_err, req_r):
        os.close(fd)
    os.set_blocking(req_w, False)
    spare = {"cg": cg, "pid": pid, "req": req_w, "fds": (w_in, r_out, r_err)}


def drop_spare(kill):
    global spare
    if spare is None:
        return
    if kill:
        try:
            os.kill(spare["pid"], signal.SIGKILL)
        except OSError:
            pass
    for fd in (spare["req"],) + spare["fds"]:
        os.close(fd)
    spare = None


def use_spare(req):
    global spare
    if spare is None or spare["cg"] != req.get("cg"):
        return None
    data = json.dumps(req).encode()
    msg = struct.pack(">I", len(data)) + data
    try:
        n = os.write(spare["req"], msg)
    except OSError:
        n = -1
    if n != len(msg):
        drop_spare(True)
        return None
    os.close(spare["req"])
    pid, fds = spare["pid"], spare["fds"]
    spare = None
    return pid, fds


# A fork that fails for want of a process (the sandbox is at its pids limit: EAGAIN) is retried with a
# bounded backoff, off the loop's path; then the command fails with exit 126 and says why. The supervisor
# itself never dies of it.
FORK_RETRY_S = 2.0
waiting = {}


def cannot_start(xid, req, why):
    send(2, xid, ("cannot start %s: %s\n" % (req["argv"][0], why)).encode())
    send(3, xid, struct.pack(">i", 126))


def start(xid, req, q=(), eof=False):
    used = use_spare(req)
    if used is not None:
        pid, (w_in, r_out, r_err) = used
    else:
        try:
            r_in, w_in, r_out, w_out, r_err, w_err = pipes()
        except OSError as e:
            return cannot_start(xid, req, e.strerror)
        try:
            pid = os.fork()
        except OSError as e:
            for fd in (r_in, w_in, r_out, w_out, r_err, w_err):
                os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.ENOMEM):
                return cannot_start(xid, req, e.strerror)
            w = waiting.get(xid)
            if w is None:
                w = waiting[xid] = {"req": req, "q": [], "eof": False, "delay": 0.01,
                                    "deadline": time.monotonic() + FORK_RETRY_S}
            if time.monotonic() >= w["deadline"]:
                del waiting[xid]
                return cannot_start(xid, req, "%s: the sandbox has as many processes as its pids limit "
                                    "allows (retried for %g s)" % (e.strerror, FORK_RETRY_S))
            w["at"] = time.monotonic() + w["delay"]
            w["delay"] = min(w["delay"] * 2, 0.25)
            return
        if pid == 0:
            try:
                join(req.get("cg"))
            except OSError as e:
                os.write(w_err, ("cannot join the command's cgroup: %s\n" % e).encode())
                os._exit(126)
            run_command(req, r_in, w_out, w_err)
        os.close(r_in)
        os.close(w_out)
        os.close(w_err)
    e = {"pid": pid, "open": 2, "status": None, "grace": None, "fds": [r_out, r_err], "w_in": w_in,
         "q": list(q), "eof": eof or not req.get("stdin")}
    execs[xid] = e
    bypid[pid] = xid
    os.set_blocking(w_in, False)
    for fd, stream in ((r_out, 1), (r_err, 2)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, ("out", xid, stream))
    pump(xid)


def retry_waiting():
    now = time.monotonic()
    for xid in [x for x, w in waiting.items() if w["at"] <= now]:
        w = waiting[xid]
        start(xid, w["req"], w["q"], w["eof"])
        if xid in execs:
            del waiting[xid]


def pump(xid):
    e = execs.get(xid)
    if e is None or e["w_in"] is None:
        return
    while e["q"]:
        try:
            n = os.write(e["w_in"], e["q"][0])
        except BlockingIOError:
            break
        except OSError:
            e["q"] = []
            e["eof"] = True
            break
        if n < len(e["q"][0]):
            e["q"][0] = e["q"][0][n:]
            break
        e["q"].pop(0)
    registered = e.get("wreg", False)
    if not e["q"] and e["eof"]:
        if registered:
            sel.unregister(e["w_in"])
        os.close(e["w_in"])
        e["w_in"] = None
    elif e["q"] and not registered:
        sel.register(e["w_in"], selectors.EVENT_WRITE, ("in", xid))
        e["wreg"] = True
    elif not e["q"] and registered:
        sel.unregister(e["w_in"])
        e["wreg"] = False


def finish(xid, force=False):
    e = execs.get(xid)
    if e is None or e["status"] is None or (e["open"] > 0 and not force):
        return
    for fd in e["fds"] + ([e["w_in"]] if e["w_in"] is not None else []):
        try:
            sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        os.close(fd)
    s = e["status"]
    code = os.WEXITSTATUS(s) if os.WIFEXITED(s) else -os.WTERMSIG(s)
    send(3, xid, struct.pack(">i", code))
    del execs[xid]


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if spare is not None and pid == spare["pid"]:
            drop_spare(False)
        xid = bypid.pop(pid, None)
        if xid is not None and xid in execs:
            execs[xid]["status"] = status
            execs[xid]["grace"] = time.monotonic() + 0.25
            finish(xid)


rsig, wsig = os.pipe()
os.set_blocking(wsig, False)
signal.set_wakeup_fd(wsig)
signal.signal(signal.SIGCHLD, lambda *a: None)
sel.register(rsig, selectors.EVENT_READ, ("sig",))
sel.register(CH, selectors.EVENT_READ, ("ctl",))
buf = b""
send(9, 0)
while True:
    due = [e["grace"] for e in execs.values() if e["grace"] is not None] + [w["at"] for w in waiting.values()]
    timeout = max(0, min(due) - time.monotonic()) if due else None
    for key, _ in sel.select(timeout):
        kind = key.data[0]
        if kind == "sig":
            os.read(rsig, 4096)
            reap()
        elif kind == "ctl":
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
                elif op in (2, 3) and xid in waiting:
                    if op == 2:
                        waiting[xid]["q"].append(payload)
                    else:
                        waiting[xid]["eof"] = True
                elif op in (2, 3) and xid in execs:
                    if op == 2:
                        execs[xid]["q"].append(payload)
                    else:
                        execs[xid]["eof"] = True
                    pump(xid)
                elif op == 5:
                    drop_spare(True)
                    make_spare(payload.decode())
                elif op == 4 and xid in waiting:
                    del waiting[xid]
                    send(3, xid, struct.pack(">i", -signal.SIGKILL))
                elif op == 4 and xid in execs:
                    try:
                        os.killpg(execs[xid]["pid"], signal.SIGKILL)
                    except OSError:
                        pass
        elif kind == "in":
            pump(key.data[1])
        else:
            _, xid, stream = key.data
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                send(stream, xid, chunk)
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
                e = execs[xid]
                e["fds"].remove(key.fd)
                e["open"] -= 1
                finish(xid)
    now = time.monotonic()
    for xid in [x for x, e in execs.items() if e["grace"] is not None and now >= e["grace"]]:
        finish(xid, force=True)
    retry_waiting()
