"""Warm start: supervised training of the policy on Vime sample batches, written in Hugging Face's layout.

    python -m vime_policy.sft --data runs/warmstart/steps --init small --out ckpt/warm [--epochs 4]

Input: the batches the coding-agent main job writes (`<run>/steps/<step>.msgpack`, msgpack lists of slime
`Sample.to_dict()` maps), read and validated by the trainer's reader (`vime_megatron.batch`).
The loss is next-token cross-entropy on the response tokens whose loss mask is 1 (the policy's own
turns; observations and the prompt are context only), averaged over those tokens. Output: a checkpoint
directory the policy server and transformers load, plus `sft_log.json` with the loss of every step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch
from torch.utils.checkpoint import checkpoint

from vime_megatron.batch import BatchError, read_batch, to_train_samples

from .init import copy_tokenizer
from .model import (
    PRESETS,
    CheckpointError,
    Qwen3Config,
    Qwen3ForCausalLM,
    load_pretrained,
    new_model,
    parameter_count,
    parse_dtype,
    save_pretrained,
)


class DataError(ValueError):
    pass


@dataclass
class Example:
    tokens: list[int]
    targets: list[int]  # positions j (into tokens) whose token is trained on: response tokens with loss mask 1
    label: str


def batch_files(paths: Iterable[str]) -> list[Path]:
    """The .msgpack files named, or inside the folders named, in step order (2 before 10)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files = [f for f in p.glob("*.msgpack") if f.is_file()]
            files.sort(key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)])
            out += files
        elif p.is_file():
            out.append(p)
        else:
            raise DataError(f"{p}: no such file or folder of .msgpack batches")
    if not out:
        raise DataError(f"no .msgpack batches in {list(paths)}")
    return out


def load_examples(paths: Iterable[str], vocab_size: int, holdout: set[str], min_reward: float | None) -> tuple[list[Example], dict[str, Any]]:
    files = batch_files(paths)
    examples: list[Example] = []
    stats = {"files": len(files), "samples": 0, "held_out": 0, "below_min_reward": 0, "tokens": 0, "trained_tokens": 0}
    for f in files:
        try:
            samples = to_train_samples(read_batch(str(f)), vocab_size)
        except BatchError as e:
            raise DataError(f"{f}: {e}") from None
        for s in samples:
            stats["samples"] += 1
            meta = s.sample.get("metadata") if isinstance(s.sample.get("metadata"), dict) else {}
            label = str(meta.get("instance_id") or s.sample.get("label") or "")
            if label in holdout:
                stats["held_out"] += 1
                continue
            if min_reward is not None and float(s.raw_reward) < min_reward:
                stats["below_min_reward"] += 1
                continue
            start = s.prompt_length
            targets = [start + k for k, m in enumerate(s.loss_mask) if m == 1]
            if not targets:
                continue
            examples.append(Example(tokens=s.tokens, targets=targets, label=label))
            stats["tokens"] += len(s.tokens)
            stats["trained_tokens"] += len(targets)
    stats["examples"] = len(examples)
    stats["distinct_tasks"] = len({e.label for e in examples})
    if not examples:
        raise DataError("no trainable samples left (every sample was held out, filtered, or had no loss-mask-1 token)")
    return examples, stats


def make_batches(examples: list[Example], max_tokens: int, rng: random.Random) -> list[list[Example]]:
    """Shuffle, then group so that rows x longest row stays within max_tokens (one row always fits)."""
    order = examples[:]
    rng.shuffle(order)
    batches: list[list[Example]] = []
    current: list[Example] = []
    longest = 0
    for e in order:
        n = len(e.tokens)
        if current and max(longest, n) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(e)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def batch_loss(model: Qwen3ForCausalLM, batch: list[Example], device: torch.device, chunk: int | None = None) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy over the batch's trained tokens, and their count.

    Logits are computed only at trained positions, in chunks that are recomputed in the backward pass,
    so a 152k vocabulary costs chunk x vocab floats at a time rather than tokens x vocab (small chunks
    are fastest on CPU, where large temporaries cost page faults; large ones on a GPU).
    """
    chunk = chunk or (4096 if device.type == "cuda" else 128)
    width = max(len(e.tokens) for e in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    rows, cols, targets = [], [], []
    for b, e in enumerate(batch):
        ids[b, : len(e.tokens)] = torch.tensor(e.tokens)
        rows += [b] * len(e.targets)
        cols += [j - 1 for j in e.targets]  # hidden state j-1 predicts token j
        targets += [e.tokens[j] for j in e.targets]
    hidden = model(ids.to(device))
    picked = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]
    labels = torch.tensor(targets, device=device)

    def ce(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model.logits(h), y, reduction="sum")

    total = hidden.new_zeros((), dtype=torch.float32)
    for s in range(0, len(targets), chunk):
        h, y = picked[s : s + chunk], labels[s : s + chunk]
        total = total + (checkpoint(ce, h, y, use_reentrant=False) if torch.is_grad_enabled() else ce(h, y))
    return total, len(targets)


def lr_at(step: int, total: int, lr: float, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    if args.init in PRESETS:
        model = new_model(Qwen3Config.preset(args.init), args.seed)
    else:
        model = load_pretrained(args.init, dtype=torch.float32)
    model = model.to(device=device, dtype=torch.float32).train()
    holdout = set()
    if args.holdout:
        holdout = {line.strip() for line in Path(args.holdout).read_text().splitlines() if line.strip() and not line.startswith("#")}
    examples, data = load_examples(args.data, model.config.vocab_size, holdout, args.min_reward)
    rng = random.Random(args.seed)
    plan = [make_batches(examples, args.batch_tokens, rng) for _ in range(args.epochs)]
    total_steps = sum(len(p) for p in plan)
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm.weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    autocast = device.type == "cuda"
    log_rows: list[dict[str, Any]] = []
    epochs: list[dict[str, Any]] = []
    started = time.monotonic()
    step = 0
    print(
        f"sft: {parameter_count(model) / 1e6:.2f}M parameters on {device}; {data['examples']} samples from "
        f"{data['files']} batches ({data['distinct_tasks']} tasks), {data['trained_tokens']} trained tokens of "
        f"{data['tokens']}; {args.epochs} epochs, {total_steps} steps",
        flush=True,
    )
    for epoch, batches in enumerate(plan):
        loss_sum, tok_sum = 0.0, 0
        for batch in batches:
            if step >= total_steps:
                break
            lr = lr_at(step, total_steps, args.lr, args.warmup, args.min_lr_ratio)
            for group in opt.param_groups:
                group["lr"] = lr
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
                loss, count = batch_loss(model, batch, device)
            (loss / count).backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            mean = loss.item() / count
            loss_sum, tok_sum = loss_sum + loss.item(), tok_sum + count
            row = {
                "step": step,
                "epoch": epoch,
                "loss": mean,
                "trained_tokens": count,
                "rows": len(batch),
                "lr": lr,
                "grad_norm": float(grad_norm),
                "elapsed_s": time.monotonic() - started,
            }
            log_rows.append(row)
            if step % args.log_every == 0 or step == total_steps - 1:
                print(
                    f"step {step:5d}  epoch {epoch}  loss {mean:8.4f}  lr {lr:.2e}  grad {row['grad_norm']:.3f}  "
                    f"{row['elapsed_s']:.1f}s",
                    flush=True,
                )
            step += 1
        if tok_sum:
            epochs.append({"epoch": epoch, "loss": loss_sum / tok_sum, "trained_tokens": tok_sum})
            print(f"epoch {epoch}: mean loss {loss_sum / tok_sum:.4f} over {tok_sum} tokens", flush=True)
    save_dtype = parse_dtype(args.save_dtype) if args.save_dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    save_pretrained(model, args.out, dtype=save_dtype)
    if args.tokenizer:
        copy_tokenizer(args.tokenizer, args.out)
    report = {
        "init": args.init,
        "parameters": parameter_count(model),
        "device": str(device),
        "torch": torch.__version__,
        "data": data,
        "args": {k: v for k, v in vars(args).items() if k not in ("func",)},
        "seconds": time.monotonic() - started,
        "epochs": epochs,
        "steps": log_rows,
    }
    (Path(args.out) / "sft_log.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} ({report['seconds']:.1f} s)", flush=True)
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vime_policy.sft", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", nargs="+", required=True, help="step batches (.msgpack) or folders of them")
    p.add_argument("--init", default="tiny", help=f"a preset ({', '.join(sorted(PRESETS))}) or a checkpoint directory")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: all epochs)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="rows x longest row per optimizer step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--save-dtype", default=None, help="float32 | bfloat16 (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--holdout", default=None, help="file of instance ids (one per line) never to train on")
    p.add_argument("--min-reward", type=float, default=None, help="train only on samples with at least this reward")
    p.add_argument("--tokenizer", default=None, help="folder with tokenizer.json to copy into the checkpoint")
    p.add_argument("--log-every", type=int, default=10)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except (DataError, CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
