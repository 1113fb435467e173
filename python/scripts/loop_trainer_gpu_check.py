"""GPU self-check of the loop trainer's megatron backend: one CUDA GPU, about a minute, one JSON verdict.

    PYTHONPATH=python/src python3 python/scripts/loop_trainer_gpu_check.py [--model-path CKPT] [--out DIR]

Without --model-path it writes vime_policy's `small` preset (seed 0, init std 0.06 so that logits are
far from uniform) and checks that. The checks:

1. `convert_fp32`: the checkpoint in a float32 megatron.core GPTModel gives vime_policy's float32 logits
   (the Qwen3 mapping: fused QKV per query group, [gate; up], q/k norms, GQA, RoPE base, tied head).
2. `export_roundtrip`: the bf16 training model exports back to the checkpoint's tensors bit for bit.
3. `parity_bf16`: the bf16 training model's log probs against vime_policy's in bf16 (the server's numerics).
4. `step`: one megatron.core step on a batch whose rollout log probs are vime_policy's bf16 teacher-forced
   scores: finite gradient, weights change, trainer-vs-rollout log-prob gap on trained tokens.
5. `export_after_step`: the exported checkpoint loads in vime_policy, scores like megatron does now, and
   differently from before the step.
6. `loop_trainer_megatron`: `python -m vime_megatron.loop_trainer --backend megatron` end to end against
   a vime_policy server on the same GPU: ready, two steps, the server serves weight versions 1 then 2.
   `loop_trainer_torch`: the same with `--backend torch --device cuda` (the plain torch fallback), one step.

Exit 0 when every check passes; the verdict is printed on stdout and written to DIR/verdict.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

import msgpack
import torch

from vime_megatron.megatron_backend import (
    MegatronBackend,
    build_qwen3_gpt,
    ensure_megatron_core,
    export_hf,
    load_hf_into,
)
from vime_megatron.packing import build_row
from vime_megatron.step_batch import load_step_batch
from vime_megatron.torch_backend import response_log_probs
from vime_policy.model import Qwen3Config, load_pretrained, new_model, read_state, save_pretrained

REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]
TOL = {"convert_fp32_max_abs_logit": 5e-3, "bf16_mean_abs_logp": 0.05, "step_gap": 0.05, "moved_mean_abs_logp": 1e-3}


def make_batch(model, path: Path, vocab: int) -> list[dict]:
    """2 prompts x 4 samples of random ids; rollout log probs = vime_policy's teacher-forced scores."""
    gen = torch.Generator().manual_seed(0)
    samples = []
    for g, rewards in enumerate(REWARDS):
        prompt = torch.randint(0, vocab - 300, (160 + 40 * g,), generator=gen).tolist()
        for k, reward in enumerate(rewards):
            response = torch.randint(0, vocab - 300, (60 + 20 * k,), generator=gen).tolist()
            tokens = prompt + response
            with torch.no_grad():
                lp = response_log_probs(model, tokens, len(response), chunk=1024).float().cpu().tolist()
            mask = [1] * len(response)
            if k == 2:  # an observation span: loss mask 0, log prob 0.0
                for j in range(10, 30):
                    mask[j], lp[j] = 0, 0.0
            samples.append({"group_index": g, "index": len(samples), "rollout_id": None, "tokens": tokens, "response_length": len(response), "reward": reward, "loss_mask": mask, "rollout_log_probs": lp, "weight_versions": ["0"] * len(response), "status": "completed", "metadata": {}})
    path.write_bytes(msgpack.packb(samples, use_single_float=False))
    return samples


def logp(logits: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Next-token log probs `[L-1]` from float logits `[L, V]`."""
    ids = torch.tensor(tokens[1:], device=logits.device)
    return torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[:, None]).squeeze(-1)


def policy_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        ids = torch.tensor([tokens], device=next(model.parameters()).device)
        return model.logits(model(ids))[0].float()


def http(url: str, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as res:
        return json.loads(res.read())


def reader(stream, timeout: float = 180.0):
    """`next_line()` for a child's stdout that fails after `timeout` s instead of hanging the check."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()

    def next_line() -> str:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no output in {timeout:.0f} s") from None
        if not line:
            raise EOFError("the process closed its stdout")
        return line

    return next_line


# Child processes import the packages (and megatron.core) from where this one does: PYTHONPATH or an install.
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "MASTER_PORT": "29547"}


def start_server(ckpt: Path, out: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "vime_policy.server", "--model-path", str(ckpt), "--port", "0", "--device", "cuda", "--weight-version", "0", "--decode-log-interval", "0"]
    server = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=open(out / "server.log", "w"), text=True)
    return server, re.search(r"(http://\S+)", reader(server.stdout)()).group(1)


def loop_trainer_check(backend: str, ckpt: Path, batch: Path, out: Path, url: str, steps: int) -> dict:
    """The trainer process with `--backend` against the policy server on this GPU, `steps` steps."""
    cmd = [sys.executable, "-m", "vime_megatron.loop_trainer", "--backend", backend, "--device", "cuda", "--model-path", str(ckpt), "--out", str(out / f"run-{backend}"), "--engine-url", url, "--lr", "1e-4"]
    log = out / f"loop_trainer-{backend}.log"
    trainer = subprocess.Popen(cmd, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    try:
        next_event = reader(trainer.stdout)
        events = [json.loads(next_event())]
        versions = []
        for step in range(1, steps + 1):
            trainer.stdin.write(json.dumps({"step": step, "batch": str(batch)}) + "\n")
            trainer.stdin.flush()
            events.append(json.loads(next_event()))
            versions.append(http(f"{url}/get_weight_version")["weight_version"])
        trainer.stdin.close()
        code = trainer.wait(120)
        done = [e for e in events[1:] if e.get("event") == "step"]
        gap = done[0]["metrics"]["logprob_abs_diff_mean"] if done else None
        ok = events[0].get("event") == "ready" and len(done) == steps and versions == [str(i) for i in range(1, steps + 1)] and code == 0 and gap is not None and gap < TOL["step_gap"]
        return {"ok": ok, "command": " ".join(cmd[1:]), "events": events, "served_versions": versions, "exit_code": code}
    except Exception as e:  # a crashed or silent child: the verdict says so, with its log's tail
        return {"ok": False, "command": " ".join(cmd[1:]), "error": f"{type(e).__name__}: {e}", "log_tail": log.read_text()[-3000:]}
    finally:
        if trainer.poll() is None:
            trainer.terminate()
            trainer.wait(30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", default=None, help="a Hugging Face Qwen3 checkpoint (default: the small preset)")
    p.add_argument("--out", default=None, help="folder for the verdict, logs and checkpoints (default: a temporary one)")
    args = p.parse_args()
    started = time.monotonic()
    out = Path(args.out or tempfile.mkdtemp(prefix="loop-trainer-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    ckpt = Path(args.model_path) if args.model_path else out / "small"
    if not args.model_path:
        save_pretrained(new_model(Qwen3Config.preset("small", initializer_range=0.06), 0), ckpt, dtype=torch.bfloat16)
    checks: dict[str, dict] = {}

    ref32 = load_pretrained(ckpt, device="cuda", dtype=torch.float32)
    ref16 = load_pretrained(ckpt, device="cuda", dtype=torch.bfloat16)
    batch_path = out / "batch.msgpack"
    samples = make_batch(ref16, batch_path, ref32.config.vocab_size)
    server, url = start_server(ckpt, out)
    try:  # the plain torch backend first (the fallback), then megatron; the server's version follows each
        checks["loop_trainer_torch"] = loop_trainer_check("torch", ckpt, batch_path, out, url, 1)
        checks["loop_trainer_megatron"] = loop_trainer_check("megatron", ckpt, batch_path, out, url, 2)
    finally:
        server.terminate()
        server.wait(30)

    try:
        in_process(ckpt, samples, batch_path, out, ref32, ref16, checks)
    except Exception:  # an API mismatch, say: the verdict carries the traceback
        checks["megatron_in_process"] = {"ok": False, "error": traceback.format_exc()[-4000:]}
    verdict = {
        "ok": all(c["ok"] for c in checks.values()),
        "checks": checks,
        "tolerances": TOL,
        "model": {"path": str(ckpt), "hidden": ref32.config.hidden_size, "layers": ref32.config.num_hidden_layers, "heads": ref32.config.num_attention_heads, "kv_heads": ref32.config.num_key_value_heads, "head_dim": ref32.config.head_dim, "tied": ref32.config.tie_word_embeddings, "parameters": sum(q.numel() for q in ref32.parameters())},
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda, "megatron_core": megatron_version(), "device": torch.cuda.get_device_name()},
        "seconds": time.monotonic() - started,
    }
    text = json.dumps(verdict, indent=1)
    (out / "verdict.json").write_text(text + "\n")
    print(text, flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0 if verdict["ok"] else 1


def megatron_version() -> str | None:
    try:
        ensure_megatron_core()
        import megatron.core
    except Exception:  # not importable here: the verdict's checks say why
        return None
    return megatron.core.__version__


def in_process(ckpt: Path, samples: list[dict], batch_path: Path, out: Path, ref32, ref16, checks: dict) -> None:
    ensure_megatron_core()
    backend = MegatronBackend(str(ckpt), lr=1e-4, max_tokens_per_gpu=1024)
    cfg = backend.cfg
    probe = samples[0]["tokens"]
    # 1. float32 conversion parity (no training wrappers: the bare GPTModel).
    _, gpt32 = build_qwen3_gpt(cfg, torch.float32)
    load_hf_into(gpt32, cfg, read_state(ckpt), str(ckpt))
    row = build_row([0], [probe])
    with torch.no_grad():
        mg32 = gpt32.eval()(row.tokens.cuda(), row.position_ids.cuda(), row.attention_mask.cuda())[0, : len(probe)].float()
    ours32 = policy_logits(ref32, probe)
    diff = float((mg32 - ours32).abs().max())
    checks["convert_fp32"] = {"ok": diff < TOL["convert_fp32_max_abs_logit"], "max_abs_logit_diff": diff, "max_abs_logp_diff": float((logp(mg32, probe) - logp(ours32, probe)).abs().max()), "logit_std": float(ours32.std())}
    del gpt32

    # 2. export round trip of the bf16 training model, before any step.
    state = read_state(ckpt)
    exported = export_hf(backend.gpt, cfg)
    bad = [k for k, v in state.items() if k in exported and not torch.equal(exported[k].cpu(), v.to(torch.bfloat16))]
    checks["export_roundtrip"] = {"ok": not bad and sorted(exported) == sorted(k for k in state if not (cfg.tie_word_embeddings and k == "lm_head.weight")), "tensors": len(exported), "differing": bad[:5]}

    # 3. bf16 parity with the policy's numerics.
    before = logp(backend.logits(probe), probe)
    ours16 = logp(policy_logits(ref16, probe), probe)
    gap16 = (before - ours16).abs()
    checks["parity_bf16"] = {"ok": float(gap16.mean()) < TOL["bf16_mean_abs_logp"], "mean_abs_logp_diff": float(gap16.mean()), "max_abs_logp_diff": float(gap16.max())}

    # 4. one step.
    batch = load_step_batch(str(batch_path), cfg.vocab_size)
    flat = lambda: torch.cat([q.detach().float().flatten() for q in backend.gpt.parameters()])  # noqa: E731
    w0 = flat()
    t0 = time.monotonic()
    result = backend.step(batch, 0.2, 0.28)
    torch.cuda.synchronize()
    step_s = time.monotonic() - t0
    delta = float((flat() - w0).norm())
    trained = [(result.log_probs[s.rollout_position] - torch.tensor(s.rollout_log_probs)).abs()[torch.tensor(s.loss_mask, dtype=torch.bool)] for s in batch.samples]
    gap = float(torch.cat(trained).mean())
    checks["step"] = {"ok": result.updated and delta > 0 and gap < TOL["step_gap"] and torch.isfinite(torch.tensor(result.grad_norm)).item(), "loss": result.loss, "grad_norm": result.grad_norm, "param_delta_l2": delta, "logprob_abs_diff_mean": gap, "micro_batches": len(result.micro_batches), "seconds": step_s}

    # 5. the exported checkpoint after the step.
    saved = out / "weights-after-step"
    backend.save(saved)
    after_mg = logp(backend.logits(probe), probe)
    after_policy = logp(policy_logits(load_pretrained(saved, device="cuda", dtype=torch.bfloat16), probe), probe)
    moved = float((after_policy - ours16).abs().mean())
    agree = float((after_policy - after_mg).abs().mean())
    checks["export_after_step"] = {"ok": agree < TOL["bf16_mean_abs_logp"] and moved > TOL["moved_mean_abs_logp"], "policy_vs_megatron_mean_abs_logp": agree, "moved_mean_abs_logp": moved}


if __name__ == "__main__":
    sys.exit(main())
