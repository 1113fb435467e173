# The proxy channel's forwarder, run inside a sandbox's own network namespace as
# `python3 -c <this file> <host socket path> <port> [program args...]`: it binds 127.0.0.1:<port>, forks a
# relay that copies each connection to the host's proxy socket, then execs the program (the bubblewrap
# session's supervisor), or exits 0 when none is given (docker). The port accepts before the program runs.
# The relay keeps only its listening socket: it must not hold the supervisor's control pipe open.
import os
import socket
import sys
import threading

sock_path, port = sys.argv[1], int(sys.argv[2])
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(128)
if os.fork() == 0:
    os.closerange(3, ls.fileno())
    os.closerange(ls.fileno() + 1, 1 << 16)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def serve(client):
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(sock_path)
        except OSError:
            client.close()
            upstream.close()
            return
        t = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        t.start()
        pump(client, upstream)
        t.join()
        client.close()
        upstream.close()

    while True:
        try:
            client, _ = ls.accept()
        except OSError:
            continue
        threading.Thread(target=serve, args=(client,), daemon=True).start()
ls.close()
if len(sys.argv) > 3:
    os.execv(sys.argv[3], sys.argv[3:])
