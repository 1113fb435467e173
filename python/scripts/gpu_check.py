"""GPU checks of the policy server and the warm start (one H200; no Node needed).

    PYTHONPATH=python/src python3 python/scripts/gpu_check.py --data <warm-start steps dir> --tokenizer <dir> --out <dir> [--sft-epochs 20]

1. The `small` preset served on CUDA (bf16, then float32): 64 concurrent requests of 512 prompt + 256
   new tokens; throughput, peak batch, and the gap between the log-probs returned while decoding and a
   float32 full-sequence recompute of the same tokens (what a trainer computes).
2. A weight update's latency and the version change.
3. The warm start of `small` on the main job's transcripts: loss per step, seconds per epoch, and a
   greedy first turn from the trained model on a training prompt.
Writes report.json (and the SFT log) under --out and prints a summary table last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import torch

from vime_policy.model import Qwen3Config, load_pretrained, new_model, save_pretrained

# Child processes import the packages from where this one does (PYTHONPATH or an install).
CHILD_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def post(url: str, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as res:
        return json.loads(res.read())


def get(url: str, path: str) -> dict:
    with urllib.request.urlopen(url + path, timeout=60) as res:
        return json.loads(res.read())


def start_server(model: Path, tokenizer: str, dtype: str, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vime_policy.server", "--model-path", str(model), "--tokenizer-path", tokenizer, "--port", "0", "--device", "cuda", "--dtype", dtype, "--max-running-requests", "64", "--context-length", "8192"],
        env=CHILD_ENV,
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        text=True,
    )
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}; see {log}")
    return proc, line.split("listening on ")[1].strip()


def serve_checks(model: Path, tokenizer: str, dtype: str, out: Path, other: Path) -> dict:
    proc, url = start_server(model, tokenizer, dtype, out / f"server-{dtype}.log")
    try:
        rng = random.Random(0)
        prompts = [[rng.randrange(0, 151643) for _ in range(512)] for _ in range(64)]
        body = lambda p, seed: {"input_ids": p, "sampling_params": {"max_new_tokens": 256, "ignore_eos": True, "sampling_seed": seed}, "return_logprob": True}  # noqa: E731
        post(url, "/generate", body(prompts[0], 0))  # warm-up
        t = time.monotonic()
        alone = post(url, "/generate", body(prompts[0], 1))
        single_s = time.monotonic() - t
        results: list = [None] * 64
        def one(i: int) -> None:
            results[i] = post(url, "/generate", body(prompts[i], 100 + i))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        t = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        batch_s = time.monotonic() - t
        info = get(url, "/server_info")["internal_states"][0]
        # Rollout log-probs against a float32 full recompute (the trainer's view) on the same tokens.
        ref = load_pretrained(model, device="cuda", dtype=torch.float32)
        diffs = []
        with torch.no_grad():
            for r, p in zip(results[:16], prompts[:16]):
                ids = p + r["output_ids"]
                lp = torch.log_softmax(ref.logits(ref(torch.tensor([ids], device="cuda"))), -1)[0]
                want = lp[len(p) - 1 : len(ids) - 1].gather(1, torch.tensor(r["output_ids"], device="cuda")[:, None]).view(-1)
                got = torch.tensor([e[0] for e in r["meta_info"]["output_token_logprobs"]], device="cuda")
                diffs.append((got - want).abs())
        d = torch.cat(diffs)
        t = time.monotonic()
        upd = post(url, "/update_weights_from_disk", {"model_path": str(other), "weight_version": "step-1"})
        update_s = time.monotonic() - t
        after = post(url, "/generate", body(prompts[0], 1))
        return {
            "dtype": dtype,
            "single_request_256_tokens_s": single_s,
            "single_request_tokens_per_s": 256 / single_s,
            "batch_64x256_s": batch_s,
            "batch_tokens_per_s": 64 * 256 / batch_s,
            "peak_running": info["peak_running"],
            "decode_steps": info["decode_steps"],
            "logprob_vs_fp32_recompute_mean_abs": d.mean().item(),
            "logprob_vs_fp32_recompute_max_abs": d.max().item(),
            "weight_update_s": update_s,
            "weight_update": upd,
            "version_after_update": after["meta_info"]["weight_version"],
            "logprobs_changed_after_update": after["meta_info"]["output_token_logprobs"] != alone["meta_info"]["output_token_logprobs"],
        }
    finally:
        proc.terminate()
        proc.wait(30)


def sft_check(data: str, tokenizer: str, out: Path, epochs: int) -> dict:
    from vime_policy.sft import load_examples
    from vime_policy.tokenizer import Detokenizer

    warm = out / "warm-small"
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "vime_policy.sft", "--data", data, "--init", "small", "--out", str(warm), "--epochs", str(epochs), "--lr", "1e-3", "--batch-tokens", "32768", "--log-every", "20"],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
    )
    (out / "sft-small.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    log = json.loads((warm / "sft_log.json").read_text())
    (out / "sft_log_small.json").write_text(json.dumps(log) + "\n")
    examples, _ = load_examples([data], 151936, set(), None)
    model = load_pretrained(warm, device="cuda", dtype=torch.bfloat16)
    detok = Detokenizer(tokenizer)
    e = examples[0]
    prompt = e.tokens[: e.targets[0]]
    ids = torch.tensor([prompt], device="cuda")
    with torch.no_grad():
        for _ in range(80):
            nxt = model.logits(model(ids))[0, -1].argmax().item()
            ids = torch.cat([ids, torch.tensor([[nxt]], device="cuda")], 1)
            if nxt == 151645:
                break
    return {
        "seconds": time.monotonic() - t,
        "epochs": log["epochs"],
        "first_loss": log["steps"][0]["loss"],
        "last_loss": log["steps"][-1]["loss"],
        "steps": len(log["steps"]),
        "data": log["data"],
        "greedy_first_turn": detok.decode(ids[0, len(prompt) :].tolist()),
        "expected_first_turn": detok.decode(e.tokens[e.targets[0] : e.targets[0] + 80]),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sft-epochs", type=int, default=20)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/vime-gpu-check")
    a, b = work / "small-seed0", work / "small-seed1"
    for path, seed in ((a, 0), (b, 1)):
        save_pretrained(new_model(Qwen3Config.preset("small"), seed), path, dtype=torch.bfloat16)
    report = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
    for dtype in ("bfloat16", "float32"):
        report[f"serve_{dtype}"] = serve_checks(a, args.tokenizer, dtype, out, b)
    report["sft_small"] = sft_check(args.data, args.tokenizer, out, args.sft_epochs)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1)[-6000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
