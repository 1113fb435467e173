# The proxy channel's forwarder on its own: a loopback port relayed to a unix socket, served here by an
# echo server; the relay it leaves behind is found by its socket path and killed after each test.
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

SOURCE = (Path(__file__).resolve().parent.parent / "vime_proxy_forwarder.py").read_text()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relays_of(sock_path):
    """Pids of the relays serving `sock_path` (their command line names it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(sock_path) in argv:
            pids.append(int(entry))
    return pids


class EchoServer:
    """A unix socket server that answers every connection with what it read, prefixed with `echo:`."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(64)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        with conn:
            data = b""
            try:
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(b"echo:" + data)
            except OSError:
                pass  # a client that leaves without reading its answer


@pytest.fixture
def channel(tmp_path):
    sock = tmp_path / "proxy.sock"
    server = EchoServer(sock)
    yield str(sock), free_port()
    server.sock.close()
    for pid in relays_of(str(sock)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def forward(sock_path, port, *program, **kwargs):
    return subprocess.run([sys.executable, "-c", SOURCE, sock_path, str(port), *program],
                          capture_output=True, timeout=20, **kwargs)


def ask(port, payload):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return answer
            answer += chunk


def test_with_no_program_it_exits_0_and_leaves_a_relay_listening(channel):
    sock, port = channel
    assert forward(sock, port).returncode == 0
    assert ask(port, b"hello") == b"echo:hello"
    assert len(relays_of(sock)) == 1


def test_relays_many_connections_at_once_both_ways_in_full(channel):
    sock, port = channel
    assert forward(sock, port).returncode == 0
    answers = {}
    payloads = {i: bytes([65 + i]) * (300_000 + i) for i in range(8)}

    def one(i):
        answers[i] = ask(port, payloads[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == {i: b"echo:" + p for i, p in payloads.items()}


def test_the_port_accepts_before_the_program_runs_in_its_place(channel):
    sock, port = channel
    client = "import socket, sys; c = socket.create_connection(('127.0.0.1', %d)); print('connected')" % port
    r = forward(sock, port, sys.executable, "-c", client)
    assert (r.returncode, r.stdout) == (0, b"connected\n")


def test_the_relay_keeps_only_its_listening_socket(channel):
    # An fd the forwarder inherits (the session's control pipe) must be closed in the relay, or the host
    # would never see that end close.
    sock, port = channel
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        assert forward(sock, port, close_fds=False).returncode == 0
        os.close(write_end)
        write_end = None
        os.set_blocking(read_end, False)
        assert os.read(read_end, 1) == b""
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)


def test_a_connection_is_closed_when_the_host_socket_is_gone(channel, tmp_path):
    _, port = channel
    gone = str(tmp_path / "gone.sock")
    try:
        assert forward(gone, port).returncode == 0
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            assert c.recv(1) == b""
    finally:
        for pid in relays_of(gone):
            os.kill(pid, signal.SIGKILL)


def test_a_port_in_use_fails_the_forwarder(channel):
    sock, _ = channel
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        r = forward(sock, taken.getsockname()[1])
    assert r.returncode != 0 and b"Address already in use" in r.stderr
