"""Tell the policy servers to load new weights: SGLang's `/update_weights_from_disk`, then check the version."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class UpdateError(RuntimeError):
    """An engine did not take the new weights; the message names the engine and its answer."""


def _call(url: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, text = res.status, res.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:  # 4xx/5xx still carry SGLang's JSON answer
        status, text = e.code, e.read().decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def update_weights(
    engine_url: str, model_path: str, weight_version: str, timeout: float = 1800.0, retries: int = 3
) -> dict[str, Any]:
    """POST the checkpoint to one engine and wait until it serves `weight_version`.

    The server answers once running requests have finished on the old weights and the new ones are
    loaded, so the wait can be long. Connection failures are retried (a restarting router); an answer
    with `success: false` is final: the engine said why.
    """
    base = engine_url.rstrip("/")
    body = {"model_path": model_path, "weight_version": weight_version, "flush_cache": True}
    for attempt in range(retries):
        try:
            status, answer = _call(f"{base}/update_weights_from_disk", body, timeout)
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            if attempt == retries - 1:
                raise UpdateError(f"{base}/update_weights_from_disk: unreachable after {retries} attempts ({e})") from None
            time.sleep(1.0 * (attempt + 1))
    if status != 200 or not isinstance(answer, dict) or answer.get("success") is not True:
        raise UpdateError(f"{base}/update_weights_from_disk answered {status}: {answer!r}")
    try:
        status, served = _call(f"{base}/get_weight_version", None, 60.0)
    except (urllib.error.URLError, OSError) as e:
        raise UpdateError(f"{base}/get_weight_version: unreachable after the update ({e})") from None
    if status != 200 or not isinstance(served, dict) or served.get("weight_version") != weight_version:
        raise UpdateError(f"{base} serves weight version {served!r} after updating to {weight_version!r}")
    return answer
