# The session supervisor on its own, outside any sandbox: a python3 child speaking its framed protocol
# over fd 3, the way the host does (session.ts).
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

SOURCE = (Path(__file__).resolve().parent.parent / "vime_sandbox_supervisor.py").read_text()
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
RUN, STDIN, STDIN_END, KILL, SPARE = 1, 2, 3, 4, 5
STDOUT, STDERR, EXIT, READY = 1, 2, 3, 9


class Supervisor:
    def __init__(self, limits=None):
        self.host, child = socket.socketpair()
        fd = child.fileno()
        # As in the session: `python3 -c <source> <rlimits JSON> <cgroup fd or empty>`, the channel at fd 3.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SOURCE, json.dumps(limits or {}), ""],
            close_fds=False,
            preexec_fn=lambda: os.dup2(fd, 3),
        )
        child.close()
        self.host.settimeout(20)
        self.pending = {}

    def send(self, op, xid, payload=b""):
        self.host.sendall(struct.pack(">BII", op, xid, len(payload)) + payload)

    def recv_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.host.recv(n - len(data))
            if not chunk:
                raise EOFError("the supervisor closed its channel")
            data += chunk
        return data

    def frame(self):
        op, xid, n = struct.unpack(">BII", self.recv_exact(9))
        return op, xid, self.recv_exact(n)

    def run(self, xid, argv, cwd="/", stdin=False, cg=None):
        req = {"argv": argv, "env": ENV, "cwd": cwd, "stdin": stdin}
        if cg is not None:
            req["cg"] = cg
        self.send(RUN, xid, json.dumps(req).encode())

    def result(self, xid):
        """Frames until `xid` exits: (stdout, stderr, code, stdout frame sizes); other execs' frames wait."""
        out = self.pending.setdefault(xid, {"out": b"", "err": b"", "sizes": [], "code": None})
        while out["code"] is None:
            op, fxid, payload = self.frame()
            got = self.pending.setdefault(fxid, {"out": b"", "err": b"", "sizes": [], "code": None})
            if op == STDOUT:
                got["out"] += payload
                got["sizes"].append(len(payload))
            elif op == STDERR:
                got["err"] += payload
            elif op == EXIT:
                got["code"] = struct.unpack(">i", payload)[0]
        del self.pending[xid]
        return out["out"], out["err"], out["code"], out["sizes"]

    def close(self):
        self.host.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def sup():
    s = Supervisor()
    assert s.frame() == (READY, 0, b"")
    yield s
    s.close()


def test_runs_a_command_and_reports_its_output_and_exit_code(sup):
    sup.run(1, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    out, err, code, _ = sup.result(1)
    assert (out, err, code) == (b"out\n", b"err\n", 3)


def test_a_command_killed_by_a_signal_exits_with_minus_the_signal(sup):
    sup.run(1, ["sh", "-c", "kill -TERM $$"])
    assert sup.result(1)[2] == -15


def test_stdin_frames_reach_the_command_and_stdin_end_closes_it(sup):
    sup.run(7, ["cat"], stdin=True)
    sup.send(STDIN, 7, b"hello ")
    sup.send(STDIN, 7, b"world")
    sup.send(STDIN_END, 7)
    assert sup.result(7)[:3] == (b"hello world", b"", 0)


def test_without_stdin_a_command_reads_end_of_file(sup):
    sup.run(1, ["sh", "-c", "cat; echo done"])
    assert sup.result(1)[:3] == (b"done\n", b"", 0)


def test_interleaved_execs_keep_their_own_output(sup):
    sup.run(1, ["sh", "-c", "sleep 0.3; echo one"])
    sup.run(2, ["sh", "-c", "echo two; exit 2"])
    assert sup.result(2)[::2] == (b"two\n", 2)
    assert sup.result(1)[::2] == (b"one\n", 0)


def test_large_output_comes_whole_in_frames_of_at_most_64_kib(sup):
    sup.run(1, ["head", "-c", "1000000", "/dev/zero"])
    out, _, code, sizes = sup.result(1)
    assert (len(out), code) == (1_000_000, 0)
    assert max(sizes) <= 1 << 16 and len(sizes) > 1


def test_kill_frame_kills_the_commands_whole_process_group(sup):
    sup.run(1, ["sh", "-c", "sleep 30 & echo $!; wait"])
    op, xid, payload = sup.frame()
    assert (op, xid) == (STDOUT, 1)
    background = int(payload)
    started = time.monotonic()
    sup.send(KILL, 1)
    assert sup.result(1)[2] == -9
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while alive(background) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(background)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_missing_program_is_127_and_a_missing_cwd_126_with_the_shells_message(sup):
    sup.run(1, ["vime-no-such-program"])
    _, err, code, _ = sup.result(1)
    assert (err, code) == (b"vime-no-such-program: command not found\n", 127)
    sup.run(2, ["true"], cwd="/vime-no-such-dir")
    _, err, code, _ = sup.result(2)
    assert (err, code) == (b"cd: /vime-no-such-dir: No such file or directory\n", 126)


def test_a_spare_child_runs_the_next_command_of_its_cgroup(sup):
    # No cgroup folder here: an empty name joins nothing, so the spare path runs as it does without cgroups.
    sup.send(SPARE, 0, b"")
    sup.run(1, ["sh", "-c", "echo via-spare"], cg="")
    assert sup.result(1)[:3] == (b"via-spare\n", b"", 0)
    # A command for a cgroup it cannot join fails alone, saying so, and the session goes on.
    sup.run(2, ["sh", "-c", "echo never"], cg="vime-no-such-cgroup")
    _, err, code, _ = sup.result(2)
    assert code == 126 and err.startswith(b"cannot join the command's cgroup: ")
    sup.run(3, ["true"])
    assert sup.result(3)[2] == 0


def test_a_command_without_a_cgroup_does_not_take_a_spare(sup):
    sup.send(SPARE, 0, b"")
    sup.run(1, ["sh", "-c", "echo plain"])
    assert sup.result(1)[:3] == (b"plain\n", b"", 0)


def test_rlimits_apply_to_every_command(tmp_path):
    s = Supervisor({"nofile": 64, "fsize": 4096})
    try:
        assert s.frame() == (READY, 0, b"")
        s.run(1, ["sh", "-c", "ulimit -n; ulimit -f"])
        out, _, code, _ = s.result(1)
        # `ulimit -f` counts 512-byte blocks.
        assert (out, code) == (b"64\n8\n", 0)
        # SIGXFSZ is back at its default: the writer dies of it (the shell reports 128 + 25).
        big = tmp_path / "big"
        s.run(2, ["sh", "-c", 'head -c 8192 /dev/zero > "$0"', str(big)])
        assert s.result(2)[2] == 128 + 25
        assert big.stat().st_size == 4096
    finally:
        s.close()


def test_closing_the_channel_ends_the_supervisor():
    s = Supervisor()
    assert s.frame() == (READY, 0, b"")
    s.host.close()
    assert s.proc.wait(10) == 0


def test_no_command_inherits_the_channel(sup):
    sup.run(1, ["sh", "-c", "readlink /proc/$$/fd/3 2>/dev/null || echo none"])
    assert sup.result(1)[:3] == (b"none\n", b"", 0)
