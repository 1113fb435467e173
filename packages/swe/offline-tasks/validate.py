"""Run the library's pytest suite once per candidate bug, fast: pytest is imported once and each run is a
forked child (no interpreter start-up, no plugin scan), so validating dozens of bugs takes seconds.

Reads one JSON object on stdin: {"workdir": str, "args": [pytest args], "timeout": wall seconds (a backstop),
"cpu_seconds": CPU seconds a run may use (the real limit),
"runs": [{"file": path relative to workdir, "content": str} or null for the clean code]}. A run may name its
own "workdir" (then "file" and "content" are optional: without them it runs that folder as it is).
Writes one JSON line per run, in order: {"index", "exit_code", "timed_out", "log"}.
The workdir must be a scratch copy: candidate files are written there and restored after each run.
"""

import json
import os
import resource
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True
import pytest  # noqa: E402  (imported once, before forking)


def run_one(workdir, args, timeout, cpu_seconds):
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:
            try:
                # CPU time, not wall time, decides that a bug loops forever: the verdict must not depend
                # on how busy the machine is.
                resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
                os.chdir(workdir)
                sys.path.insert(0, workdir)
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                code = pytest.main(list(args))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(int(code))
            except BaseException:  # noqa: BLE001  (the child must never return into the loop)
                os._exit(99)
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                timed_out = True
                status = -1
                break
            time.sleep(0.005)
        out.seek(0)
        log = out.read().decode("utf-8", "replace")
    exit_code = None if timed_out else os.waitstatus_to_exitcode(status)
    if exit_code is not None and exit_code < 0:
        # Killed by a signal (SIGXCPU/SIGKILL at the CPU limit): the bug made the suite hang.
        exit_code, timed_out = None, True
    return exit_code, timed_out, log


def main():
    request = json.load(sys.stdin)
    for index, candidate in enumerate(request["runs"]):
        original = None
        path = None
        workdir = (candidate or {}).get("workdir", request.get("workdir"))
        if candidate is not None and "file" in candidate:
            path = os.path.join(workdir, candidate["file"])
            with open(path, encoding="utf-8") as f:
                original = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(candidate["content"])
        try:
            exit_code, timed_out, log = run_one(workdir, request["args"], request["timeout"], request["cpu_seconds"])
        finally:
            if path is not None:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
        sys.stdout.write(json.dumps({"index": index, "exit_code": exit_code, "timed_out": timed_out, "log": log}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
