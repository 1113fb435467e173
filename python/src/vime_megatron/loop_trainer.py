"""The closed loop's trainer: a long-lived process that trains one GRPO step per step batch and syncs weights.

    PYTHONPATH=python/src python -m vime_megatron.loop_trainer --model-path CKPT --out RUN \\
        --engine-url http://127.0.0.1:30000 --backend megatron|torch

stdin: one JSON line per step, `{"step": N, "batch": "/abs/steps/N.msgpack"}`. Per step: validate the
batch, recompute slime's GRPO advantages, one optimizer step with slime's PPO-clip loss, write slime's
dumps (`rollout_data/N.pt`, `train_data/N.pt`), the new Hugging Face checkpoint (`weights/step-N/`,
atomically), and POST `/update_weights_from_disk` with weight version "N" to every engine.
stdout: JSON events only (`ready`, then `step` or `error` per line read); logs go to stderr. A bad
request line or batch is answered with an `error` event and the process waits for the next line; a
failed weight update is not recoverable (exit 1). EOF on stdin: exit 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import IO, Any

import torch

from . import dump
from .batch import BatchError
from .engines import UpdateError, update_weights
from .step_batch import StepBatch, load_step_batch


class Events:
    """The protocol stream: one JSON object per line, flushed; also appended to `metrics.jsonl` for steps."""

    def __init__(self, stream: IO[str], metrics_path: Path):
        self.stream, self.metrics_path = stream, metrics_path

    def emit(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, allow_nan=False)
        self.stream.write(line + "\n")
        self.stream.flush()
        if event["event"] in ("step", "error"):
            with open(self.metrics_path, "a") as f:
                f.write(line + "\n")


def log(message: str) -> None:
    print(f"[loop_trainer] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vime_megatron.loop_trainer", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="Hugging Face Qwen3 checkpoint folder (config.json + model.safetensors)")
    p.add_argument("--out", required=True, help="run folder: weights/, rollout_data/, train_data/, metrics.jsonl")
    p.add_argument("--engine-url", action="append", default=[], help="policy server to update after each step (repeatable)")
    p.add_argument("--backend", choices=("megatron", "torch"), default="megatron")
    p.add_argument("--device", default="auto", help="torch backend: auto | cpu | cuda | cuda:N (megatron: CUDA only)")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--n-samples-per-prompt", type=int, default=None, help="default: from group_index")
    p.add_argument("--disable-grpo-std-normalization", action="store_true", help="Dr.GRPO: mean-centring only")
    p.add_argument("--eps-clip", type=float, default=0.2)
    p.add_argument("--eps-clip-high", type=float, default=0.28)
    p.add_argument("--max-tokens-per-gpu", type=int, default=8192, help="megatron: token budget of one packed micro-batch")
    p.add_argument("--temperature", type=float, default=1.0, help="the rollouts' sampling temperature (log probs of logits / T)")
    p.add_argument("--update-timeout", type=float, default=1800.0, help="seconds to wait for an engine to take new weights")
    p.add_argument("--keep-checkpoints", type=int, default=0, help="keep only the newest K weights/step-N folders (0: all)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    for name in ("lr", "eps_clip", "eps_clip_high", "temperature", "update_timeout"):
        value = getattr(args, name)
        if not math.isfinite(value) or value <= 0:
            p.error(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    if args.max_tokens_per_gpu < 1:
        p.error(f"--max-tokens-per-gpu must be at least 1, got {args.max_tokens_per_gpu}")
    if args.keep_checkpoints < 0:
        p.error(f"--keep-checkpoints must be 0 (keep all) or more, got {args.keep_checkpoints}")
    if args.n_samples_per_prompt is not None and args.n_samples_per_prompt < 1:
        p.error(f"--n-samples-per-prompt must be at least 1, got {args.n_samples_per_prompt}")
    return args


def make_backend(args: argparse.Namespace):
    if args.backend == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(args.model_path, args.device, args.lr, args.clip_grad, args.temperature, args.seed)
    from .megatron_backend import MegatronBackend

    return MegatronBackend(args.model_path, args.lr, args.clip_grad, args.temperature, args.max_tokens_per_gpu, args.seed)


def parse_request(line: str, last_step: int) -> tuple[int, str]:
    """`{"step": N, "batch": PATH}` with N > the last trained step; ValueError names the field."""
    try:
        req = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"request line is not JSON ({e}); send {{\"step\": N, \"batch\": PATH}}") from None
    if not isinstance(req, dict):
        raise ValueError(f"request must be a JSON object, found {type(req).__name__}")
    step, batch = req.get("step"), req.get("batch")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"step: expected a positive integer (weight version 0 is the initial checkpoint), found {step!r}")
    if step <= last_step:
        raise ValueError(f"step: {step} is not after the last trained step {last_step}; steps must increase")
    if not isinstance(batch, str) or not batch:
        raise ValueError(f"batch: expected the path of the step's .msgpack batch, found {batch!r}")
    return step, batch


def write_checkpoint(backend, weights_dir: Path, step: int) -> Path:
    """Write `weights/step-N/` under a temporary name and rename it: a reader sees all of it or none."""
    final = weights_dir / f"step-{step}"
    tmp = weights_dir / f".step-{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        backend.save(tmp)
    except BaseException:  # a full disk, say: leave no half-written folder behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def prune_checkpoints(weights_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` step folders (the engines serve the newest; a real Qwen3 is GBs each)."""
    if keep <= 0:
        return
    steps = sorted((int(p.name[5:]), p) for p in weights_dir.glob("step-*") if p.name[5:].isdigit())
    for _, path in steps[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def logprob_gap(batch: StepBatch, log_probs: dict[int, torch.Tensor]) -> float | None:
    """Mean |trainer log p - rollout log p| over trained tokens (loss mask 1), before the update."""
    total, count = 0.0, 0
    for s in batch.samples:
        mask = torch.tensor(s.loss_mask, dtype=torch.bool)
        if mask.any():
            rollout = torch.tensor(s.rollout_log_probs, dtype=torch.float32)
            total += float((log_probs[s.rollout_position] - rollout).abs()[mask].sum())
            count += int(mask.sum())
    return total / count if count else None


def train_step(args: argparse.Namespace, backend, out: Path, step: int, batch_path: str) -> dict[str, Any]:
    started = time.monotonic()
    try:
        batch = load_step_batch(
            batch_path, backend.vocab_size, args.n_samples_per_prompt, std_normalization=not args.disable_grpo_std_normalization
        )
    except OSError as e:  # only reading the batch maps to bad_batch; a failure after the step is fatal
        raise BatchError(f"cannot read the batch ({e.strerror or e}); pass the path of the step's .msgpack file") from None
    result = backend.step(batch, args.eps_clip, args.eps_clip_high)
    trained = time.monotonic()
    dump.save(dump.rollout_payload(step, batch.raw), str(out / "rollout_data" / f"{step}.pt"))
    dump.save(
        dump.train_payload(step, batch.samples, batch.advantages, batch.mask_sums, result.log_probs, result.micro_batches),
        str(out / "train_data" / f"{step}.pt"),
    )
    checkpoint = write_checkpoint(backend, out / "weights", step)
    saved = time.monotonic()
    for url in args.engine_url:
        update_weights(url, str(checkpoint), str(step), timeout=args.update_timeout)
    prune_checkpoints(out / "weights", args.keep_checkpoints)  # only once every engine serves the new one
    done = time.monotonic()
    rewards = [float(s.raw_reward) for s in batch.samples]
    versions = sorted({str(v) for s in batch.raw for v in (s.get("weight_versions") or [])})
    return {
        "event": "step",
        "step": step,
        "weight_version": str(step),
        "checkpoint": str(checkpoint),
        "metrics": {
            "loss": result.loss,
            "grad_norm": result.grad_norm if math.isfinite(result.grad_norm) else None,
            "logprob_abs_diff_mean": logprob_gap(batch, result.log_probs),
            "tokens": batch.tokens,
            "trained_tokens": batch.trained_tokens,
            "samples": len(batch.samples),
            "seconds": done - started,
            "train_seconds": trained - started,
            "save_seconds": saved - trained,
            "update_seconds": done - saved,
            "pg_clipfrac": result.pg_clipfrac,
            "ppo_kl": result.ppo_kl,
            "updated": result.updated,
            "reward_mean": sum(rewards) / len(rewards),
            "n_samples_per_prompt": batch.n_samples_per_prompt,
            "micro_batches": len(result.micro_batches),
            "rollout_weight_versions": versions,
        },
    }


def serve(args: argparse.Namespace, events: Events, stdin: IO[str]) -> int:
    out = Path(args.out)
    for sub in ("weights", "rollout_data", "train_data"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    backend = make_backend(args)
    events.emit(
        {
            "event": "ready",
            "backend": backend.name,
            "label": backend.label,
            "weight_version": "0",
            "model_path": str(args.model_path),
            "parameters": backend.parameters,
            "precision": backend.precision,
            "device": str(getattr(backend, "device", "cuda")),
            "engines": list(args.engine_url),
            "torch": torch.__version__,
        }
    )
    last_step = 0
    for line in stdin:
        if not line.strip():
            continue
        try:
            step, batch_path = parse_request(line, last_step)
        except ValueError as e:
            events.emit({"event": "error", "step": None, "code": "bad_request", "message": str(e)})
            continue
        try:
            event = train_step(args, backend, out, step, batch_path)
        except BatchError as e:
            events.emit({"event": "error", "step": step, "code": "bad_batch", "message": f"{batch_path}: {e}"})
            continue
        except UpdateError as e:  # the engines serve other weights than the trainer holds: stop
            events.emit({"event": "error", "step": step, "code": "update_failed", "message": str(e)})
            backend.close()
            return 1
        last_step = step
        if not event["metrics"]["updated"]:
            log(f"step {step}: non-finite gradient norm; the update was skipped and the weights are unchanged")
        log(
            f"step {step}: loss {event['metrics']['loss']:.5f}, grad_norm {event['metrics']['grad_norm']}, "
            f"|Δlogp| {event['metrics']['logprob_abs_diff_mean']}, {event['metrics']['seconds']:.2f} s"
        )
        events.emit(event)
    log("stdin closed; exiting")
    backend.close()
    return 0


def main(argv: list[str] | None = None, stdin: IO[str] | None = None, protocol: IO[str] | None = None) -> int:
    args = parse_args(argv)
    if protocol is None:
        # The protocol owns the real stdout; anything a library prints goes to stderr with the logs.
        protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    events = Events(protocol, Path(args.out) / "metrics.jsonl")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        return serve(args, events, stdin or sys.stdin)
    except ValueError as e:  # vime_policy's CheckpointError (a ValueError): the model folder is at fault
        if type(e).__name__ != "CheckpointError":
            raise
        return user_error(events, "bad_model", str(e))
    except ImportError as e:  # a missing module (megatron.core): the message says where it goes
        return user_error(events, "setup", str(e))
    except SystemExit as e:  # megatron's setup refuses this machine (no CUDA GPU, several ranks)
        if not isinstance(e.code, str):
            raise
        return user_error(events, "setup", e.code)
    except Exception as e:  # an internal failure: say it on the protocol too, then fail with the traceback
        events.emit({"event": "error", "step": None, "code": "fatal", "message": f"{type(e).__name__}: {e}"})
        raise


def user_error(events: Events, code: str, message: str) -> int:
    events.emit({"event": "error", "step": None, "code": code, "message": message})
    log(f"error: {message}")
    return 2

if __name__ == "__main__":
    sys.exit(main())
