"""GRPO training steps with megatron.core on a Vime sample batch, writing slime-format dumps.

    python -m vime_megatron.train --batch batch.msgpack --out runs/demo --steps 5

One process, one GPU (TP = PP = DP = 1). Each step trains the whole batch as one rollout
(`--rollout-id` + step): the advantages come from the batch's raw rewards through slime's group
normalisation, the model is a random-initialised megatron.core `GPTModel` (local layer spec, bf16),
micro-batches run through megatron.core's pipeline schedule, and the update goes through its
distributed optimizer. After each step the rollout and train dumps are written as slime's
`--save-debug-rollout-data` / `--save-debug-train-data` would, and `metrics.json` at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from functools import partial
from typing import Any

import torch

from . import dump
from .batch import BatchError, infer_group_size, normalize_rewards, read_batch, rollout_mask_sums, to_train_samples
from .loss import SampleTerms, sum_of_sample_means
from .packing import PackedRow, build_row, next_token_log_probs, pack_microbatches, response_slices


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vime_megatron.train", description=__doc__.split("\n")[0])
    p.add_argument("--batch", required=True, help="encodeSamples msgpack file (slime sample dicts)")
    p.add_argument("--out", required=True, help="output folder: rollout_data/, train_data/, metrics.json")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    p.add_argument("--rollout-id", type=int, default=0, help="rollout id of the first step (default 0)")
    p.add_argument("--n-samples-per-prompt", type=int, default=None, help="default: from group_index")
    p.add_argument("--disable-grpo-std-normalization", action="store_true", help="Dr.GRPO: mean-centring only")
    p.add_argument("--eps-clip", type=float, default=0.2)
    p.add_argument("--eps-clip-high", type=float, default=0.28)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--max-tokens-per-gpu", type=int, default=256, help="token budget of one micro-batch")
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--num-layers", type=int, default=4)
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--num-attention-heads", type=int, default=4)
    p.add_argument("--ffn-hidden-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    return args


def init_megatron(seed: int) -> None:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if not torch.cuda.is_available():
        raise SystemExit("megatron.core's training schedule and DDP buffers need a CUDA GPU; none is visible")
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    if int(os.environ["WORLD_SIZE"]) != 1:
        raise SystemExit("this example trains on one GPU (TP = PP = DP = 1); run it without torchrun -n > 1")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(backend="nccl")
    # Gloo groups only serve distributed-optimizer checkpoint gathers, which this example does not do.
    parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    model_parallel_cuda_manual_seed(seed)


def build_model(args: argparse.Namespace, max_length: int):
    """GPTModel (local spec, RMSNorm, SwiGLU, RoPE) in bf16, wrapped in megatron.core's DDP, and its optimizer."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads,
        ffn_hidden_size=args.ffn_hidden_size,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        hidden_dropout=0.0,  # no dropout: the dumped log probs are the policy's, not a noisy sample
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
    )
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=args.vocab_size,
        max_sequence_length=max_length,
        position_embedding_type="rope",
    ).cuda()
    model, optimizer = wrap_for_training(config, gpt, args.lr, args.clip_grad)
    return gpt, model, optimizer


def wrap_for_training(config, gpt, lr: float, clip_grad: float):
    """Float16Module + megatron.core's DDP around a built GPTModel, its distributed optimizer, and the hooks
    megatron's own training loop wires up before the first step."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True
    )
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=Float16Module(config, gpt))
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=lr,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.98,
            clip_grad=clip_grad,
            bf16=True,
            params_dtype=torch.bfloat16,
            use_distributed_optimizer=True,
        ),
        [model],
        use_gloo_process_groups=False,
    )
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    return model, optimizer


def on_gpu(row: PackedRow) -> PackedRow:
    return dataclasses.replace(
        row,
        tokens=row.tokens.cuda(),
        position_ids=row.position_ids.cuda(),
        attention_mask=row.attention_mask.cuda(),
    )


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in module.parameters()])


@torch.no_grad()
def score(model, rows: list[PackedRow], samples) -> dict[int, torch.Tensor]:
    """Per-sample response log probs of the current weights (forward only)."""
    out: dict[int, torch.Tensor] = {}
    for row in rows:
        logits = model(row.tokens, row.position_ids, row.attention_mask)
        lp = next_token_log_probs(logits, row.tokens)
        members = [samples[p] for p in row.positions]
        slices = response_slices(row, [s.total_length for s in members], [s.response_length for s in members])
        for p, sl in zip(row.positions, slices):
            out[p] = lp[sl].float().cpu()
    return out


def mean_log_prob_by_sign(log_probs: dict[int, torch.Tensor], samples, rewards) -> dict[str, float]:
    """Mean log p of trainable tokens in samples with positive / negative advantage."""
    out = {}
    for name, keep in (("positive", lambda a: a > 0), ("negative", lambda a: a < 0)):
        picked = [
            log_probs[s.rollout_position][torch.tensor(s.loss_mask, dtype=torch.bool)]
            for s in samples
            if keep(rewards[s.rollout_position])
        ]
        out[name] = round(float(torch.cat(picked).mean()), 6) if picked else None
    return out


def movement(before: dict[int, torch.Tensor], after: dict[int, torch.Tensor], samples, rewards) -> dict[str, Any]:
    """How log p moved on trainable tokens, split by the sign of the token's advantage."""
    result: dict[str, Any] = {}
    for name, keep in (("positive", lambda a: a > 0), ("negative", lambda a: a < 0), ("zero", lambda a: a == 0)):
        deltas = []
        for s in samples:
            if keep(rewards[s.rollout_position]):
                mask = torch.tensor(s.loss_mask, dtype=torch.bool)
                deltas.append((after[s.rollout_position] - before[s.rollout_position])[mask])
        d = torch.cat(deltas) if deltas else torch.zeros(0)
        result[name] = {
            "samples": len(deltas),
            "tokens": int(d.numel()),
            "mean_delta_log_prob": float(d.mean()) if d.numel() else None,
            "fraction_up": float((d > 0).float().mean()) if d.numel() else None,
        }
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("NO_VCS_VERSION", "1")  # megatron.core's version module would call git otherwise

    raw = read_batch(args.batch)
    samples = to_train_samples(raw, vocab_size=args.vocab_size)
    n = args.n_samples_per_prompt or infer_group_size(raw)
    if len(samples) % n:
        raise SystemExit(f"{len(samples)} samples do not split into groups of n_samples_per_prompt={n}")
    rewards = normalize_rewards(
        [s.raw_reward for s in samples], n, len(samples) // n, std_normalization=not args.disable_grpo_std_normalization
    )
    mask_sums = rollout_mask_sums(samples)
    micro_batches = pack_microbatches([s.total_length for s in samples], args.max_tokens_per_gpu)
    rows = [build_row(mb, [samples[p].tokens for p in mb]) for mb in micro_batches]
    # slime's reducer scale: the schedule divides by num_microbatches; the loss is a mean over rollouts.
    num_rollouts = len({s.rollout_id for s in samples})
    scale = len(rows) / num_rollouts

    init_megatron(args.seed)
    rows = [on_gpu(row) for row in rows]
    # Per-sample loss inputs live on the GPU for the whole run.
    old = {s.rollout_position: torch.tensor(s.rollout_log_probs, dtype=torch.float32).cuda() for s in samples}
    masks = {s.rollout_position: torch.tensor(s.loss_mask, dtype=torch.float32).cuda() for s in samples}
    import megatron.core
    from megatron.core.pipeline_parallel import get_forward_backward_func

    max_length = max(row.tokens.shape[1] for row in rows)
    gpt, model, optimizer = build_model(args, max_length)
    forward_backward = get_forward_backward_func()
    n_params = sum(p.numel() for p in gpt.parameters())

    # Packing check: each sample alone in its own row must score like it does packed.
    initial = score(model, rows, samples)
    single = score(model, [on_gpu(build_row([s.rollout_position], [s.tokens])) for s in samples], samples)
    packed_vs_single = max(float((initial[p] - single[p]).abs().max()) for p in initial)

    step_metrics = []
    for step in range(args.steps):
        rollout_id = args.rollout_id + step
        collected: dict[int, torch.Tensor] = {}
        totals: dict[str, Any] = {"pg_loss": 0.0, "pg_clipfrac": 0.0, "ppo_kl": 0.0}

        def loss_func(row: PackedRow, logits: torch.Tensor):
            lp = next_token_log_probs(logits, row.tokens)
            members = [samples[p] for p in row.positions]
            slices = response_slices(row, [s.total_length for s in members], [s.response_length for s in members])
            terms = []
            for s, sl in zip(members, slices):
                p = s.rollout_position
                collected[p] = lp[sl].detach()
                terms.append(
                    SampleTerms(
                        log_probs=lp[sl],
                        old_log_probs=old[p],
                        advantages=torch.full_like(lp[sl], rewards[p]),  # GRPO: the reward on every token
                        loss_mask=masks[p],
                        mask_sum=mask_sums[p],
                    )
                )
            loss, parts = sum_of_sample_means(terms, args.eps_clip, args.eps_clip_high)
            for key, value in parts.items():
                totals[key] += value / num_rollouts
            one = torch.ones((), dtype=torch.int, device=logits.device)
            return loss * scale, one, {"pg_loss": loss.detach()}

        def forward_step(data_iterator, model):
            row = next(data_iterator)
            logits = model(row.tokens, row.position_ids, row.attention_mask)
            return logits, partial(loss_func, row)

        before = flat_params(gpt)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=forward_step,
            data_iterator=iter(rows),
            model=[model],
            num_microbatches=len(rows),
            seq_length=max_length,
            micro_batch_size=1,
            forward_only=False,
        )
        update_successful, grad_norm, _ = optimizer.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        delta = float((flat_params(gpt) - before).norm())

        dump.save(dump.rollout_payload(rollout_id, raw), os.path.join(args.out, "rollout_data", f"{rollout_id}.pt"))
        dump.save(
            dump.train_payload(rollout_id, samples, rewards, mask_sums, collected, micro_batches),
            os.path.join(args.out, "train_data", f"{rollout_id}.pt"),
        )
        trained = {p: lp.float().cpu() for p, lp in collected.items()}
        entry = {
            "step": step,
            "rollout_id": rollout_id,
            "mean_log_prob_before_update": mean_log_prob_by_sign(trained, samples, rewards),
            **{k: round(float(v), 8) for k, v in totals.items()},
            "grad_norm": float(grad_norm) if grad_norm is not None else None,
            "update_successful": bool(update_successful),
            "param_delta_l2": delta,
            "step_seconds": round(seconds, 4),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
        }
        if step == 0:
            # The training forward and a forward-only pass of the same weights must agree.
            entry["train_forward_vs_score_max_abs_diff"] = max(
                float((trained[p] - initial[p]).abs().max()) for p in initial
            )
        step_metrics.append(entry)
        print(json.dumps(entry), flush=True)

    final = score(model, rows, samples)
    metrics = {
        "batch": {
            "samples": len(samples),
            "n_samples_per_prompt": n,
            "tokens": sum(s.total_length for s in samples),
            "trainable_tokens": sum(sum(s.loss_mask) for s in samples),
            "raw_rewards": [s.raw_reward for s in samples],
            "normalized_rewards": rewards,
        },
        "packing": {
            "max_tokens_per_gpu": args.max_tokens_per_gpu,
            "micro_batches": micro_batches,
            "row_lengths": [int(row.tokens.shape[1]) for row in rows],
            "packed_vs_single_max_abs_log_prob_diff": packed_vs_single,
        },
        "model": {
            "parameters": n_params,
            "num_layers": args.num_layers,
            "hidden_size": args.hidden_size,
            "num_attention_heads": args.num_attention_heads,
            "ffn_hidden_size": args.ffn_hidden_size,
            "vocab_size": args.vocab_size,
            "dtype": "bf16 (fp32 main params in the distributed optimizer)",
        },
        "loss": {
            "advantage_estimator": "grpo",
            "grpo_std_normalization": not args.disable_grpo_std_normalization,
            "eps_clip": args.eps_clip,
            "eps_clip_high": args.eps_clip_high,
            "old_log_probs": "rollout_log_probs",
            "lr": args.lr,
            "clip_grad": args.clip_grad,
        },
        "steps": step_metrics,
        "log_prob_movement": movement(initial, final, samples, rewards),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "megatron_core": megatron.core.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(),
        },
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    print(json.dumps({"log_prob_movement": metrics["log_prob_movement"], "packed_vs_single": packed_vs_single}))
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BatchError as error:  # bad input: say what and where, without a traceback
        print(f"vime_megatron.train: {error}", file=sys.stderr)
        sys.exit(2)
