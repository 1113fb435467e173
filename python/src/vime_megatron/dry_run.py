"""Write the dumps a training step would write, without a model: CPU only, no megatron.core.

    python -m vime_megatron.dry_run --batch batch.msgpack --out runs/dry [--rollout-id 0]

Everything except the trainer's own log probs is computed exactly as in `vime_megatron.train`
(batch validation, group normalisation, packing layout); the engine's `rollout_log_probs` stand in
for the trainer's `log_probs`. It lets a machine without a GPU check the batch and the dump format.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from . import dump
from .batch import BatchError, infer_group_size, normalize_rewards, read_batch, rollout_mask_sums, to_train_samples
from .packing import pack_microbatches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vime_megatron.dry_run", description=__doc__.split("\n")[0])
    p.add_argument("--batch", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rollout-id", type=int, default=0)
    p.add_argument("--n-samples-per-prompt", type=int, default=None)
    p.add_argument("--disable-grpo-std-normalization", action="store_true")
    p.add_argument("--max-tokens-per-gpu", type=int, default=256)
    args = p.parse_args(argv)

    raw = read_batch(args.batch)
    samples = to_train_samples(raw)
    n = args.n_samples_per_prompt or infer_group_size(raw)
    if len(samples) % n:
        p.error(f"{len(samples)} samples do not split into groups of n_samples_per_prompt={n}")
    rewards = normalize_rewards(
        [s.raw_reward for s in samples], n, len(samples) // n, std_normalization=not args.disable_grpo_std_normalization
    )
    micro_batches = pack_microbatches([s.total_length for s in samples], args.max_tokens_per_gpu)
    log_probs = {s.rollout_position: torch.tensor(s.rollout_log_probs, dtype=torch.float32) for s in samples}
    rid = args.rollout_id
    dump.save(dump.rollout_payload(rid, raw), os.path.join(args.out, "rollout_data", f"{rid}.pt"))
    dump.save(
        dump.train_payload(rid, samples, rewards, rollout_mask_sums(samples), log_probs, micro_batches),
        os.path.join(args.out, "train_data", f"{rid}.pt"),
    )
    print(f"wrote rollout_data/{rid}.pt and train_data/{rid}.pt for {len(samples)} samples to {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BatchError as error:  # bad input: say what and where, without a traceback
        print(f"vime_megatron.dry_run: {error}", file=sys.stderr)
        sys.exit(2)
