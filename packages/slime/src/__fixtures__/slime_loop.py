"""slime's rollout step around the bridge, reconstructed from THUDM/slime at commit 624b824 so the bridge's
functions run where slime calls them (slime itself needs GPUs and SGLang):

- slime/rollout/sglang_rollout.py: `generate_rollout_async` (over-sampling refill, `assert len(group) ==
  n_samples_per_prompt`, dynamic-sampling filter with `call_dynamic_filter` /
  `should_drop_dynamic_filter_output` and the drop counter), `generate_and_rm_group`, `generate_and_rm`
  (custom generate function; the reward model is skipped for ABORTED rows and asked for rows whose reward
  is None);
- slime/rollout/filter_hub/base_types.py: `DynamicFilterOutput`, the bool-compatible filter call;
- slime/ray/rollout.py: `_get_rollout_data` (rollout-id check, flattening), `_post_process_rewards`
  (default group reshape and mean/std normalisation, or `--custom-reward-post-process-path`);
- slime/observability/rollout_metrics.py: `log_rollout_data` (custom hook, then the `perf N: {...}` line).

Prints one JSON object for the test to check.
"""
import asyncio
import itertools
import json
import sys
import types
from dataclasses import dataclass

import torch

import vime_bridge
from stand_in_sample import Sample


@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


# The bridge imports this from slime when slime is installed; here it comes from the reconstruction.
base_types = types.ModuleType("slime.rollout.filter_hub.base_types")
base_types.DynamicFilterOutput = DynamicFilterOutput
for name in ("slime", "slime.rollout", "slime.rollout.filter_hub"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["slime.rollout.filter_hub.base_types"] = base_types


def should_drop(output, remaining_batch_size, target_data_size):
    if output.keep:
        return False
    return not (output.keep_when_insufficient and remaining_batch_size <= target_data_size)


def call_filter(fn, args, group):
    if fn is None:
        return DynamicFilterOutput(keep=True)
    out = fn(args, group)
    return out if isinstance(out, DynamicFilterOutput) else DynamicFilterOutput(keep=out)


rm_calls = []


async def async_rm(args, sample):
    rm_calls.append(sample.index)
    return 0.0


async def generate_and_rm(args, sample, params):
    sample = await vime_bridge.generate(args, sample, params)
    if isinstance(sample, list):
        if any(s.status == Sample.Status.ABORTED for s in sample):
            return sample
        for s in sample:
            if s.reward is None:
                s.reward = await async_rm(args, s)
        return sample
    if sample.status == Sample.Status.ABORTED:
        return sample
    if sample.reward is None:
        sample.reward = await async_rm(args, sample)
    return sample


async def generate_and_rm_group(args, group, params):
    return list(await asyncio.gather(*(generate_and_rm(args, s, dict(params)) for s in group)))


async def generate_rollout_async(args, data_source):
    dynamic_filter = vime_bridge.drop_infra_failed_groups if args.dynamic_sampling_filter_path else None
    drops = {}
    target = args.rollout_batch_size
    data, pendings, remaining = [], set(), 0
    while len(data) < target:
        while remaining < target:
            for group in data_source(args.over_sampling_batch_size):
                pendings.add(asyncio.ensure_future(generate_and_rm_group(args, group, args.sampling_params)))
                remaining += 1
        done, pendings = await asyncio.wait(pendings, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            group = task.result()
            assert len(group) == args.n_samples_per_prompt
            out = call_filter(dynamic_filter, args, group)
            if should_drop(out, remaining, target):
                if out.reason:
                    drops[f"rollout/dynamic_filter/drop_{out.reason}"] = drops.get(f"rollout/dynamic_filter/drop_{out.reason}", 0) + 1
                remaining -= 1
                continue
            if len(data) < target:
                data.append(group)
    for task in pendings:  # slime's abort() of the requests still running
        task.cancel()
    await asyncio.gather(*pendings, return_exceptions=True)
    assert len(data) == target

    def first(g):
        return g[0][0].index if isinstance(g[0], list) else g[0].index

    return sorted(data, key=first), drops


def validate_rollout_ids(node, depth=0):
    if isinstance(node, Sample):
        return
    if node and isinstance(node[0], Sample):
        if depth >= 2 and len(node) > 1:
            rids = [s.rollout_id for s in node]
            assert None not in rids and len(set(rids)) == 1, f"siblings with rollout ids {rids}"
        return
    for child in node:
        validate_rollout_ids(child, depth + 1)


def default_post_process(args, samples):
    raw = [s.get_reward_value(args) for s in samples]
    rewards = torch.tensor(raw, dtype=torch.float)
    if rewards.shape[-1] == args.n_samples_per_prompt * args.rollout_batch_size:
        rewards = rewards.reshape(-1, args.n_samples_per_prompt)
    else:
        rewards = rewards.view(-1, rewards.shape[-1])
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    return raw, rewards.flatten().tolist()


def main():
    spec = json.loads(sys.argv[1])
    args = types.SimpleNamespace(
        rollout_batch_size=spec["batch"],
        n_samples_per_prompt=spec["n"],
        over_sampling_batch_size=spec["over_sampling"],
        dynamic_sampling_filter_path=spec.get("filter"),
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        reward_key=None,
        sampling_params={"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64},
    )
    prompts = iter(spec["prompts"])
    index = itertools.count()

    def data_source(count):
        groups = []
        for group_index, prompt in zip(range(count), prompts):
            groups.append([
                Sample(group_index=prompt["group"], index=(i := next(index)), rollout_id=i, prompt=prompt["id"],
                       metadata=dict(prompt["metadata"]))
                for _ in range(args.n_samples_per_prompt)
            ])
        return groups

    try:
        data, drops = asyncio.run(generate_rollout_async(args, data_source))
    except Exception as error:  # the test checks what a run without the filter ends with
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return
    validate_rollout_ids(data)
    flat = data
    while isinstance(flat[0], list):
        flat = list(itertools.chain.from_iterable(flat))
    raw, normalised = vime_bridge.normalize_rewards_by_group(args, flat)
    try:
        default_raw, default_normalised = default_post_process(args, flat)
        default = {"raw": default_raw, "normalised": default_normalised}
    except Exception as error:
        default = {"error": f"{type(error).__name__}: {error}"}
    extra = dict(drops)
    skipped = vime_bridge.log_rollout_metrics(0, args, flat, extra, 1.0)
    print(json.dumps({
        "groups": [
            {"group": g[0][0].group_index if isinstance(g[0], list) else g[0].group_index,
             "size": len(g),
             "rows": [len(x) if isinstance(x, list) else 1 for x in g]}
            for g in data
        ],
        "rows": [{"index": s.index, "group": s.group_index, "rollout_id": s.rollout_id, "reward": s.reward,
                  "status": s.status.value, "infra": vime_bridge.infra_failure(s)} for s in flat],
        "raw": raw,
        "normalised": normalised,
        "default": default,
        "rm_calls": rm_calls,
        "perf_line": f"perf 0: {extra}",
        "hook_skips_default": skipped,
    }))


main()
