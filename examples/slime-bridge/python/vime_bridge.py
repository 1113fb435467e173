"""slime custom generate function that runs each rollout on a Vime rollout server.

Use it with slime:

    --custom-generate-function-path vime_bridge.generate
    VIME_ROLLOUT_URL=http://<host>:<port>   (the server started by `startRolloutServer`)

Each call sends one slime sample (its `to_dict()`) and the sampling parameters to the server as msgpack
and returns the training rows of that rollout, built with `Sample.from_dict` from the msgpack reply: one
`Sample`, or a list when the rollout produced several rows (a forked trajectory). Cancelling the
coroutine closes the connection, which aborts the rollout on the server and frees its slot.

Only the standard library and `msgpack` are needed.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from typing import Any
from urllib.parse import urlsplit

import msgpack

__all__ = ["generate", "RolloutServerError"]


class RolloutServerError(RuntimeError):
    """The rollout server refused or failed a rollout."""


def _sample_class() -> Any:
    spec = os.environ.get("VIME_SAMPLE_CLASS", "slime.utils.types:Sample")
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _jsonable(value: Any) -> Any:
    # to_dict() can carry enums or numpy scalars in user metadata; msgpack needs plain values.
    if hasattr(value, "value"):
        return value.value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


async def _post(url: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        head = (
            f"POST {parts.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/msgpack\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while (size := int((await reader.readline()).split(b";")[0], 16)) > 0:
                chunks.append(await reader.readexactly(size))
                await reader.readline()
            return status, b"".join(chunks)
        if "content-length" in headers:
            return status, await reader.readexactly(int(headers["content-length"]))
        return status, await reader.read()
    finally:
        writer.close()


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any] | None = None) -> Any:
    url = os.environ.get("VIME_ROLLOUT_URL") or getattr(args, "vime_rollout_url", None)
    if not url:
        raise RolloutServerError("set VIME_ROLLOUT_URL to the Vime rollout server, e.g. http://127.0.0.1:8600")
    timeout = float(os.environ.get("VIME_ROLLOUT_TIMEOUT", "3600"))
    body = msgpack.packb(
        {"sample": sample.to_dict(), "sampling_params": dict(sampling_params or {})},
        use_bin_type=True,
        default=_jsonable,
    )
    status, payload = await asyncio.wait_for(_post(url, "/rollout", body, timeout), timeout)
    if status != 200:
        try:
            error = json.loads(payload)["error"]
            message = f"{error['code']}: {error['message']}"
        except Exception:
            message = payload[:500].decode("utf-8", "replace")
        raise RolloutServerError(f"rollout server {url} answered {status}: {message}")
    cls = _sample_class()
    rows = [cls.from_dict(d) for d in msgpack.unpackb(payload, raw=False)]
    return rows[0] if len(rows) == 1 else rows
