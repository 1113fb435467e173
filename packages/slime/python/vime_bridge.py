"""slime's custom rollout functions backed by a Vime rollout server.

Use them with slime (the argv `vime skypilot render` / `vime ray submit` build passes all four):

    --custom-generate-function-path          vime_bridge.generate
    --dynamic-sampling-filter-path           vime_bridge.drop_infra_failed_groups
    --over-sampling-batch-size               > --rollout-batch-size, so dropped groups are refilled
    --custom-reward-post-process-path        vime_bridge.normalize_rewards_by_group
    --custom-rollout-log-function-path       vime_bridge.log_rollout_metrics
    VIME_ROLLOUT_URL=http://<host>:<port>    the server started by `startRolloutServer`

`generate` sends one slime sample (its `to_dict()`) and the sampling parameters to the server as msgpack
and returns the training rows of that rollout, built with `Sample.from_dict`, always as a list (several
rows when the trajectory forked; every row carries the rollout's `rollout_id`). Always a list, because
slime's `RolloutManager._get_rollout_data` flattens the batch while its *first* element is a list: a batch
mixing `Sample` and `list[Sample]` answers would keep nested lists.
Cancelling the coroutine closes the connection, which aborts the rollout on the server and frees its slot.

Infrastructure failures. The server retries a rollout that fails for infrastructure reasons; one that
still fails comes back as a single row with status `aborted` (slime's `generate_and_rm` then skips the
reward model), reward `None`, `remove_sample` and `metadata["vime_infra_failure"]`. Such a row must not
reach slime's reward math (`RolloutManager._post_process_rewards` builds a tensor of every reward), so
`drop_infra_failed_groups` drops its whole group in `generate_rollout_async` (slime/rollout/
sglang_rollout.py), which then fetches `--over-sampling-batch-size` more prompts until the batch is full.
`generate` refuses to hand such a row to a slime run that has no dynamic-sampling filter.

Rewards. slime's default post-processing reshapes the flat reward list to `(-1, n_samples_per_prompt)`
only when there are exactly `n * rollout_batch_size` rows; with forked rollouts there are more, and it
then normalises the whole batch as one group. `normalize_rewards_by_group` normalises per `group_index`
over rollouts (each `rollout_id` once), in slime's float32 arithmetic, and gives every row its rollout's
value.

Needs `msgpack`, and `torch` for the reward post-processing (both are in every slime job).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import msgpack

__all__ = [
    "RolloutServerError",
    "drop_infra_failed_groups",
    "generate",
    "infra_failure",
    "log_rollout_metrics",
    "normalize_rewards_by_group",
    "rollout_metrics",
]

INFRA_FAILURE = "vime_infra_failure"
FILTER_PATH = "vime_bridge.drop_infra_failed_groups"
# Estimators whose rewards slime normalises per group, and those it also divides by the std (ray/rollout.py).
_GROUP_NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
_STD_NORMALISED = ("grpo", "gspo", "cispo")

logger = logging.getLogger("vime_bridge")

# Groups dropped for infrastructure failures since the last `log_rollout_metrics`, by cause. The filter
# and the log hook both run in slime's rollout manager process.
_dropped_groups: Counter[str] = Counter()


class RolloutServerError(RuntimeError):
    """The rollout server refused or failed a rollout, or the slime run cannot take its answer."""


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


def infra_failure(sample: Any) -> dict[str, Any] | None:
    """The cause of a row's infrastructure failure ({code, message, attempts}), or None for a real row."""
    metadata = getattr(sample, "metadata", None)
    return metadata.get(INFRA_FAILURE) if isinstance(metadata, dict) else None


def _rows(group: Any) -> list[Any]:
    """The rows of a group: its samples, with each forked rollout's list flattened."""
    out: list[Any] = []
    for item in group:
        out.extend(item if isinstance(item, list) else [item])
    return out


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
    failed = next((f for f in map(infra_failure, rows) if f), None)
    if failed and not getattr(args, "dynamic_sampling_filter_path", None):
        # Without the filter slime would put this group in the batch and fail on its None reward.
        raise RolloutServerError(
            f"rollout of sample {getattr(sample, 'index', None)} failed for infrastructure reasons "
            f"({failed.get('code')}: {failed.get('message')}) and this slime run has no dynamic-sampling "
            f"filter to drop it: pass --dynamic-sampling-filter-path {FILTER_PATH} and an "
            "--over-sampling-batch-size above --rollout-batch-size"
        )
    return rows


def drop_infra_failed_groups(args: Any, samples: Any, **kwargs: Any) -> Any:
    """slime dynamic-sampling filter: drop a group holding any infrastructure-failed row (counted by cause)."""
    causes = [f.get("code", "unknown") for f in map(infra_failure, _rows(samples)) if f]
    keep = not causes
    if not keep:
        _dropped_groups.update(set(causes))
        _dropped_groups["groups"] += 1
    try:
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:  # slime versions before DynamicFilterOutput take a bool
        return keep
    return DynamicFilterOutput(keep=keep, reason=None if keep else INFRA_FAILURE)


def _reward_value(args: Any, sample: Any) -> float:
    if hasattr(sample, "get_reward_value"):
        value = sample.get_reward_value(args)
    else:
        value = sample.reward
        if isinstance(value, dict):
            value = value[getattr(args, "reward_key", None)]
    if value is None:
        failure = infra_failure(sample)
        raise RolloutServerError(
            f"sample {getattr(sample, 'index', None)} reached reward post-processing without a reward"
            + (f" (an infrastructure failure: {failure.get('code')}); use --dynamic-sampling-filter-path "
               f"{FILTER_PATH}" if failure else "")
        )
    return float(value)


def normalize_rewards_by_group(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """slime `--custom-reward-post-process-path`: (raw rewards, normalised rewards), one of each per row.

    The statistics are over rollouts, not rows: rows are grouped by `group_index`, each `rollout_id`
    counts once (its first row's reward), and every row gets its rollout's normalised reward. The
    arithmetic is slime's (float32 torch: centre on the mean, divide by the std of the centred rewards
    plus 1e-6), except that a group of one rollout has std 0 where slime's `torch.std` gives NaN.
    """
    import torch

    raw = [_reward_value(args, s) for s in samples]
    estimator = getattr(args, "advantage_estimator", None)
    if estimator not in _GROUP_NORMALISED or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    divide = estimator in _STD_NORMALISED and getattr(args, "grpo_std_normalization", True)
    keys = [
        (s.group_index if s.group_index is not None else ("row", i), s.rollout_id if s.rollout_id is not None else ("row", i))
        for i, s in enumerate(samples)
    ]
    groups: dict[Any, dict[Any, float]] = {}
    for (group, rollout), reward in zip(keys, raw):
        groups.setdefault(group, {}).setdefault(rollout, reward)
    normalised: dict[Any, dict[Any, float]] = {}
    for group, rollouts in groups.items():
        rewards = torch.tensor(list(rollouts.values()), dtype=torch.float)
        rewards = rewards - rewards.mean()
        if divide:
            std = rewards.std() if len(rollouts) > 1 else torch.zeros(())
            rewards = rewards / (std + 1e-6)
        normalised[group] = dict(zip(rollouts, rewards.tolist()))
    return raw, [normalised[group][rollout] for group, rollout in keys]


def _pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    at = (len(sorted_values) - 1) * q
    lo, hi = math.floor(at), math.ceil(at)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (at - lo)


def rollout_metrics(samples: list[Any]) -> dict[str, float]:
    """Vime's rollout metrics of a batch (each rollout once) and of the groups dropped since the last call."""
    rollouts: dict[Any, Any] = {}
    for s in samples:
        rollouts.setdefault((s.group_index, s.rollout_id if s.rollout_id is not None else id(s)), s)
    metrics: dict[str, float] = {"vime/rollouts": float(len(rollouts))}
    by_group: dict[Any, list[float]] = {}
    outcomes: Counter[str] = Counter()
    hacks: Counter[str] = Counter()
    phases: dict[str, list[float]] = {}
    for (group, _), s in rollouts.items():
        reward = s.reward if isinstance(s.reward, (int, float)) else None
        if reward is not None:
            by_group.setdefault(group, []).append(float(reward))
        meta = s.metadata if isinstance(s.metadata, dict) else {}
        if meta.get("grade_outcome"):
            outcomes[str(meta["grade_outcome"])] += 1
        for kind in set(meta.get("hacks") or []):
            hacks[str(kind)] += 1
        for name, ms in (meta.get("vime_phases_ms") or {}).items():
            phases.setdefault(str(name), []).append(float(ms))
    rewards = [r for rs in by_group.values() for r in rs]
    if rewards:
        metrics["vime/reward_mean"] = sum(rewards) / len(rewards)
        n_min = min(len(rs) for rs in by_group.values())
        k = 1
        while k <= n_min:
            metrics[f"vime/pass@{k}"] = sum(
                _pass_at_k(len(rs), sum(1 for r in rs if r >= 1.0), k) for rs in by_group.values()
            ) / len(by_group)
            k *= 2
    for outcome, count in sorted(outcomes.items()):
        metrics[f"vime/grade_outcome/{outcome}"] = float(count)
    metrics["vime/hacked_rollouts"] = float(
        sum(1 for s in rollouts.values() if isinstance(s.metadata, dict) and s.metadata.get("hacks"))
    )
    for kind, count in sorted(hacks.items()):
        metrics[f"vime/hacks/{kind}"] = float(count)
    for name, values in sorted(phases.items()):
        values.sort()
        for label, q in (("p50", 0.5), ("p90", 0.9), ("max", 1.0)):
            metrics[f"vime/phase_ms/{name}/{label}"] = _percentile(values, q)
    metrics["vime/infra_failed_groups"] = float(_dropped_groups.pop("groups", 0))
    for cause, count in sorted(_dropped_groups.items()):
        metrics[f"vime/infra_failure/{cause}"] = float(count)
    _dropped_groups.clear()
    return metrics


def log_rollout_metrics(rollout_id: int, args: Any, samples: list[Any], rollout_extra_metrics: Any, rollout_time: float) -> bool:
    """slime `--custom-rollout-log-function-path`: add Vime's metrics to the step's extra metrics.

    Returns False, so slime's own `log_rollout_data` goes on and logs them with its metrics: in the
    `perf <rollout_id>: {...}` line `vime-metrics` reads back, and through slime's logging backends.
    """
    metrics = rollout_metrics(samples)
    if isinstance(rollout_extra_metrics, dict):
        rollout_extra_metrics.update(metrics)
    else:  # no extra-metrics dict to join (a debug-data run): log them here
        logger.info(f"vime rollout metrics {rollout_id}: {metrics}")
    return False
