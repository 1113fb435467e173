"""The loop trainer through its entry point (`python -m vime_megatron.loop_trainer --backend torch`, plain
torch, CPU), against a real policy server on loopback: rollouts sampled by the server, one GRPO step, the
checkpoint, the weight update and the protocol's error paths."""

from __future__ import annotations

import io
import json
import queue
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import msgpack
import pytest
import torch

from vime_megatron import loop_trainer
from vime_megatron.batch import normalize_rewards
from vime_megatron.dry_run import main as dry_run
from vime_megatron.torch_backend import response_log_probs
from vime_policy.model import load_pretrained
from vime_testing import CHILD_ENV

PROMPTS = [[151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198], [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198]]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


def http(url: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.loads(res.read())


class Proc:
    """A child process whose stdout lines are read on a thread (so a hung child fails the test, not CI)."""

    def __init__(self, argv: list[str]):
        self.p = subprocess.Popen(
            argv, env=CHILD_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.p.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.p.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def line(self, timeout: float = 120.0) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output in {timeout}s; stderr:\n{''.join(s for s in self.stderr if s)}") from None
        assert line is not None, f"stdout closed; stderr:\n{''.join(s for s in self.stderr if s)}"
        return line

    def event(self, timeout: float = 120.0) -> dict:
        return json.loads(self.line(timeout))

    def send(self, obj) -> None:
        self.p.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.p.stdin.flush()

    def close(self, timeout: float = 60.0) -> int:
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        try:
            return self.p.wait(timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny preset, written by the documented command."""
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    subprocess.run([sys.executable, "-m", "vime_policy.init", "--preset", "tiny", "--seed", "0", "--out", str(out)], env=CHILD_ENV, check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def server(tiny: Path):
    proc = Proc([sys.executable, "-m", "vime_policy.server", "--model-path", str(tiny), "--port", "0", "--device", "cpu", "--weight-version", "0", "--decode-log-interval", "0", "--context-length", "1024"])
    match = re.search(r"listening on (http://\S+)", proc.line(180))
    assert match, proc.stderr
    yield match.group(1)
    proc.p.terminate()
    proc.close()


@pytest.fixture(scope="module")
def rollouts(server: str) -> list[dict]:
    """2 prompts x 4 samples sampled by the server (weight version 0), in slime's `Sample.to_dict()` layout."""
    samples = []
    for g, prompt in enumerate(PROMPTS):
        for k in range(4):
            out = http(f"{server}/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 10 * g + k, "ignore_eos": True}, "return_logprob": True})
            meta = out["meta_info"]
            logp = [e[0] for e in meta["output_token_logprobs"]]
            mask = [1] * len(logp)
            if k == 1:  # a tool-observation-like token: loss mask 0 and log prob 0.0, as slime writes them
                mask[-1], logp[-1] = 0, 0.0
            samples.append(
                {
                    "group_index": g,
                    "index": len(samples),
                    "rollout_id": None,
                    "prompt": "",
                    "tokens": prompt + out["output_ids"],
                    "response_length": len(out["output_ids"]),
                    "reward": REWARDS[g][k],
                    "loss_mask": mask,
                    "weight_versions": [meta["weight_version"]] * len(logp),
                    "rollout_log_probs": logp,
                    "status": "completed",
                    "metadata": {"instance_id": f"task-{g}"},
                }
            )
    return samples


def write(path: Path, samples: list[dict]) -> str:
    path.write_bytes(msgpack.packb(samples, use_single_float=False))
    return str(path)


def trainer(tiny: Path, out: Path, *engines: str, extra: tuple[str, ...] = ()) -> Proc:
    argv = [sys.executable, "-m", "vime_megatron.loop_trainer", "--backend", "torch", "--device", "cpu", "--model-path", str(tiny), "--out", str(out), "--lr", "1e-2", *extra]
    for url in engines:
        argv += ["--engine-url", url]
    return Proc(argv)


def scored(model, samples: list[dict]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [response_log_probs(model, s["tokens"], s["response_length"]) for s in samples]


def test_a_step_trains_on_server_rollouts_writes_weights_and_updates_the_server(tiny, server, rollouts, tmp_path):
    samples = rollouts
    assert {v for s in samples for v in s["weight_versions"]} == {"0"}
    batch = write(tmp_path / "1.msgpack", samples)
    out = tmp_path / "run"
    t = trainer(tiny, out, server, extra=("--keep-checkpoints", "1"))
    ready = t.event(180)
    assert ready["event"] == "ready" and ready["backend"] == "torch" and ready["label"] == "plain torch"
    assert ready["weight_version"] == "0" and ready["parameters"] > 2_000_000

    t.send({"step": 1, "batch": batch})
    ev = t.event()
    assert ev["event"] == "step" and ev["step"] == 1 and ev["weight_version"] == "1", ev
    m = ev["metrics"]
    # The rollout log probs came from the same weights: the trainer's recompute agrees on trained tokens.
    assert m["logprob_abs_diff_mean"] < 1e-4, m
    assert m["samples"] == 8 and m["trained_tokens"] == sum(sum(s["loss_mask"]) for s in samples) and m["updated"] is True
    assert m["grad_norm"] > 0 and m["rollout_weight_versions"] == ["0"] and m["n_samples_per_prompt"] == 4
    assert set(m) >= {"loss", "grad_norm", "logprob_abs_diff_mean", "tokens", "samples", "seconds"}

    # The server took the new weights: its version, and what it samples from now on.
    assert http(f"{server}/get_weight_version")["weight_version"] == "1"
    again = http(f"{server}/generate", {"input_ids": PROMPTS[0], "sampling_params": {"max_new_tokens": 2}, "return_logprob": True})
    assert again["meta_info"]["weight_version"] == "1"

    # The checkpoint loads in vime_policy and scores the same tokens differently.
    ckpt = Path(ev["checkpoint"])
    assert ckpt == out / "weights" / "step-1" and (ckpt / "config.json").is_file()
    assert not [p for p in (out / "weights").iterdir() if p.name.startswith(".")]  # no temporary left behind
    before, after = scored(load_pretrained(tiny), samples), scored(load_pretrained(ckpt), samples)
    assert max(float((a - b).abs().max()) for a, b in zip(after, before)) > 1e-3
    for s, lp in zip(samples, before):  # and the initial weights reproduce the server's log probs
        mask = torch.tensor(s["loss_mask"], dtype=torch.bool)
        assert torch.allclose(lp[mask], torch.tensor(s["rollout_log_probs"])[mask], atol=1e-4)

    # Bad input is answered by an error event naming the field; the process keeps serving.
    broken = [dict(s) for s in samples]
    broken[1]["reward"], broken[1]["status"] = None, "failed"
    t.send({"step": 2, "batch": write(tmp_path / "broken.msgpack", broken)})
    err = t.event()
    assert err["event"] == "error" and err["code"] == "bad_batch" and err["step"] == 2
    assert "sample [1].reward: missing (status 'failed')" in err["message"]
    for path in (tmp_path / "missing.msgpack", tmp_path):  # no such file; a folder
        t.send({"step": 2, "batch": str(path)})
        err = t.event()
        assert err["code"] == "bad_batch" and "cannot read the batch" in err["message"], err
    for line, field in (("not json", "not JSON"), ('{"step": 1, "batch": "x"}', "not after the last trained step 1"), ('{"step": "2", "batch": "x"}', "step: expected a positive integer"), ('{"step": 3}', "batch: expected")):
        t.send(line)
        err = t.event()
        assert err["code"] == "bad_request" and field in err["message"], err
    assert http(f"{server}/get_weight_version")["weight_version"] == "1"

    # The same batch again is now off-policy: the gap measures the update.
    t.send({"step": 2, "batch": batch})
    ev2 = t.event()
    assert ev2["event"] == "step" and ev2["weight_version"] == "2" and ev2["metrics"]["logprob_abs_diff_mean"] > 1e-3
    assert http(f"{server}/get_weight_version")["weight_version"] == "2"
    assert sorted(p.name for p in (out / "weights").iterdir()) == ["step-2"]  # --keep-checkpoints 1
    assert t.close() == 0, "".join(s for s in t.stderr if s)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["event"] for e in logged] == ["step", *["error"] * 7, "step"]

    # The dumps: slime's GRPO advantages from the raw rewards, the trainer's log probs, slime's layout.
    train = torch.load(out / "train_data" / "1.pt")
    rollout = torch.load(out / "rollout_data" / "1.pt")
    assert train["rollout_id"] == 1 and rollout["rollout_id"] == 1 and len(rollout["samples"]) == 8
    raw = [r for group in REWARDS for r in group]
    expected = normalize_rewards(raw, 4, 2)
    for g in range(2):  # slime: (r - mean) / (unbiased std + 1e-6), per group of n_samples_per_prompt
        r = torch.tensor(REWARDS[g], dtype=torch.float32)
        assert torch.equal(torch.tensor(expected[4 * g : 4 * g + 4]), (r - r.mean()) / (r.std() + 1e-6))
    for row, s, adv, lp in zip(train["samples"], samples, expected, before):
        assert torch.equal(row["advantages"], torch.full((s["response_length"],), adv, dtype=torch.float32))
        assert torch.allclose(row["log_probs"], lp, atol=1e-5)
    assert dry_run(["--batch", batch, "--out", str(tmp_path / "dry")]) == 0
    reference = torch.load(tmp_path / "dry" / "train_data" / "0.pt")
    assert list(train) == list(reference)
    for ours, theirs in zip(train["samples"], reference["samples"]):
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            assert type(ours[key]) is type(value), key
            if isinstance(value, torch.Tensor):
                assert ours[key].dtype == value.dtype and ours[key].shape == value.shape, key
            elif key not in ("log_probs", "rollout_mask_sums"):
                assert ours[key] == value, key


def test_a_failed_weight_update_is_reported_and_ends_the_process(tiny, rollouts, tmp_path):
    batch = write(tmp_path / "1.msgpack", rollouts)
    # A port nothing listens on: bind one, then close it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    t = trainer(tiny, tmp_path / "run", dead)
    assert t.event(180)["event"] == "ready"
    t.send({"step": 1, "batch": batch})
    err = t.event()
    assert err["event"] == "error" and err["code"] == "update_failed" and dead in err["message"], err
    assert t.close() == 1


def run_main(argv: list[str]) -> tuple[int, list[dict]]:
    """The entry point's main() in this process (the error paths need no second torch import)."""
    out = io.StringIO()
    code = loop_trainer.main(argv, stdin=io.StringIO(""), protocol=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_bad_model_folder_is_a_user_error(tmp_path, capsys):
    code, events = run_main(["--backend", "torch", "--model-path", str(tmp_path), "--out", str(tmp_path / "run")])
    assert code == 2 and len(events) == 1
    assert events[0]["event"] == "error" and events[0]["code"] == "bad_model" and "no config.json" in events[0]["message"]
    assert "Traceback" not in capsys.readouterr().err


def test_the_megatron_backend_without_a_gpu_says_so(tiny, tmp_path, capsys):
    code, events = run_main(["--backend", "megatron", "--model-path", str(tiny), "--out", str(tmp_path / "run")])
    assert code == 2 and events[0]["code"] == "setup" and "CUDA GPU" in events[0]["message"], events
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--lr", "0"), ("--lr", "nan"), ("--eps-clip", "-1"), ("--max-tokens-per-gpu", "0"), ("--n-samples-per-prompt", "0"), ("--keep-checkpoints", "-1")])
def test_bad_flags_exit_2_naming_the_flag(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        loop_trainer.parse_args(["--model-path", str(tmp_path), "--out", str(tmp_path), flag, value])
    assert e.value.code == 2 and flag in capsys.readouterr().err
