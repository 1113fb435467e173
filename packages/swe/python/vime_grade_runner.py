# The grader's side of a pytest run in the grading sandbox: `python -I -S -B <this file> <spec> <pytest args>`,
# in the work dir, started where the test command would have started pytest (after its environment set-up).
#
# It runs no code of the repository. It reads its spec (then deletes it), makes itself non-dumpable (no
# process it starts can ptrace it or open its /proc/<pid>/fd), writes canary tests into the hidden test
# files (random names and bodies, after the patch) and makes those files read-only, then starts pytest
# (`vime_grade_boot.py`, the same interpreter, a clean environment) with two pipes: one for the boot's
# set-up (read, then closed, before any code of the repository is imported) and one for the grader
# plugin's records. pytest's stdout and stderr go to a third pipe: that is the log, for humans only.
# When pytest has exited, one JSON frame goes to this process's stdout, which nothing pytest starts can
# reach: the records, the process's own exit status, the canaries and the bounded log.
#
# It says "vime-grade-runner: started" on stderr first; a failure of this program itself exits 3 with one
# more line there ("vime-grade-runner: <error>"): the grader failed, not the patch.
import json
import os
import secrets
import selectors
import subprocess
import sys
import time

# `-I` keeps this file's folder off the path; the canary writer sits beside it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vime_grade_canaries as canaries  # noqa: E402

LOG_HEAD = 2 << 20
LOG_TAIL = 2 << 20
REPORT_MAX = 32 << 20
# After pytest exits, how long its leftovers (processes a test started) may keep the log pipe open.
DRAIN_S = 1.0


def not_dumpable():
    import ctypes

    # PR_SET_DUMPABLE = 4: without it a test could write this process's stdout through /proc/<pid>/fd/1.
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def clean_env():
    """The environment of the test run: no PYTEST_* or PYTHON* from anywhere, then the grader's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


class Log:
    """The run's output, head and tail kept, the middle counted."""

    def __init__(self):
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = LOG_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > LOG_TAIL:
                del self.tail[: len(self.tail) - LOG_TAIL]

    def text(self):
        elided = self.total - len(self.head) - len(self.tail)
        middle = b"\n[... %d bytes elided ...]\n" % elided if elided > 0 else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", "replace")


class Report:
    """The plugin's records: one JSON object a line, each with the run's nonce and the next sequence number."""

    def __init__(self, nonce):
        self.nonce = nonce
        self.buf = bytearray()
        self.size = 0
        self.records = []
        self.evidence = []
        self.overflow = False
        self.seq = 0

    def add(self, data):
        self.size += len(data)
        if self.size > REPORT_MAX:
            self.overflow = True
            return
        self.buf += data
        while True:
            end = self.buf.find(b"\n")
            if end < 0:
                return
            line = bytes(self.buf[:end])
            del self.buf[: end + 1]
            self.line(line)

    def line(self, line):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or record.get("n") != self.nonce:
            self.evidence.append("a record on the report channel that the grader's plugin did not write: %r" % line[:200])
            return
        if record.get("s") != self.seq:
            self.evidence.append("report record %r out of sequence (expected %d)" % (record.get("s"), self.seq))
        self.seq = (record.get("s") if isinstance(record.get("s"), int) else self.seq) + 1
        del record["n"]
        self.records.append(record)

    def finish(self):
        if self.buf:
            self.evidence.append("an unterminated record on the report channel: %r" % bytes(self.buf[:200]))


def spawn(spec, args, env, boot_setup):
    """Start pytest's process; returns it with the read ends of the report and log pipes."""
    setup_r, setup_w = os.pipe()
    report_r, report_w = os.pipe()
    log_r, log_w = os.pipe()
    argv = [sys.executable, "-I", "-B", spec["boot"], str(setup_r), str(report_w)] + args
    proc = subprocess.Popen(
        argv,
        cwd=spec["workdir"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_w,
        stderr=log_w,
        pass_fds=(setup_r, report_w),
        close_fds=True,
    )
    for fd in (setup_r, report_w, log_w):
        os.close(fd)
    data = json.dumps(boot_setup).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(setup_w, view) :]
    except BrokenPipeError:
        pass
    os.close(setup_w)
    return proc, report_r, log_r


def drain(proc, report_r, log_r, report, log):
    """Read both pipes until they end, or until pytest has been gone for DRAIN_S (a process a test left
    behind may hold a pipe open: a fork inherits every descriptor); then whatever is still buffered in
    them is read too, however loaded the machine: all pytest wrote before it exited is there."""
    sel = selectors.DefaultSelector()
    sel.register(report_r, selectors.EVENT_READ, report)
    sel.register(log_r, selectors.EVENT_READ, log)
    deadline = None
    while sel.get_map():
        if deadline is None and proc.poll() is not None:
            deadline = time.monotonic() + DRAIN_S
        if deadline is not None and time.monotonic() >= deadline:
            for key in list(sel.get_map().values()):
                read_buffered(key.fd, key.data)
            break
        for key, _ in sel.select(0.2):
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                key.data.add(chunk)
            else:
                sel.unregister(key.fd)
    status = proc.wait()
    report.finish()
    for fd in (report_r, log_r):
        os.close(fd)
    return status


def read_buffered(fd, sink):
    os.set_blocking(fd, False)
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            sink.add(chunk)
    except BlockingIOError:
        return


def main():
    # Said before anything else: a run without this line never reached the grader's code (infrastructure).
    sys.stderr.write("vime-grade-runner: started\n")
    sys.stderr.flush()
    spec_path = sys.argv[1]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.unlink(spec_path)
    not_dumpable()
    # The test command's own choice: with autoload on, the environment's plugins are loaded by name.
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    env = clean_env()
    planted = canaries.plant(spec["hidden"])
    nonce = secrets.token_hex(16)
    boot_setup = {
        "nonce": nonce,
        "workdir": spec["workdir"],
        "hidden": [h["path"] for h in spec["hidden"]],
        "wanted": spec["wanted"],
        "canaries": planted["boot"],
        "config": spec["config"],
        "packages": spec.get("packages", []),
        "moduleFiles": spec.get("moduleFiles", []),
        "preimport": spec.get("preimport", []),
        "autoload": autoload,
    }
    proc, report_r, log_r = spawn(spec, sys.argv[2:], env, boot_setup)
    report, log = Report(nonce), Log()
    status = drain(proc, report_r, log_r, report, log)
    frame = {
        "v": 1,
        "exit": {"code": status} if status >= 0 else {"signal": -status},
        "records": report.records,
        "evidence": report.evidence,
        "overflow": report.overflow,
        "canaries": planted["canaries"],
        "plantNotes": planted["notes"],
        "log": log.text(),
        "logBytes": log.total,
    }
    out = json.dumps(frame).encode()
    view = memoryview(out)
    while view:
        view = view[os.write(1, view) :]


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the grader's own failure, never the patch's
        sys.stderr.write("vime-grade-runner: %s: %s\n" % (type(e).__name__, e))
        sys.exit(3)
