"""The warm start on a small batch in the main job's format: the loss falls, the trained checkpoint loads
and scores its training responses higher, hold-outs are excluded, and bad input is refused by field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
import torch

from vime_policy.init import main as init_main
from vime_policy.model import load_pretrained
from vime_policy.sft import main as sft_main
from vime_testing import SOURCES


def sample(task: str, prompt: list[int], response: list[int], mask: list[int], reward: float, index: int) -> dict:
    return {
        "group_index": index // 2,
        "index": index,
        "rollout_id": index,
        "prompt": "",
        "tokens": prompt + response,
        "response": "",
        "response_length": len(response),
        "label": task,
        "reward": reward,
        "loss_mask": mask,
        "rollout_log_probs": [-1.0] * len(response),
        "weight_versions": ["default"],
        "status": "completed",
        "metadata": {"instance_id": task},
    }


def write_batch(path: Path) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i, task in enumerate(["task-a", "task-a", "task-b", "task-b", "held-out", "held-out"]):
        prompt = torch.randint(0, 151936, (12,), generator=g).tolist()
        # Two policy turns with an observation between them (loss mask 0 on the observation).
        turn1, obs, turn2 = [100 + i, 200, 300, 151645], [400, 401, 402], [500 + i, 600, 151645]
        rows.append(sample(task, prompt, turn1 + obs + turn2, [1] * 4 + [0] * 3 + [1] * 3, float(i % 2), i))
    path.write_bytes(msgpack.packb(rows))
    return rows


def response_logprob(model, row: dict) -> float:
    ids = torch.tensor([row["tokens"]])
    start = len(row["tokens"]) - row["response_length"]
    with torch.no_grad():
        lp = torch.log_softmax(model.logits(model(ids)), -1)[0]
    return sum(lp[start + k - 1, row["tokens"][start + k]].item() for k, m in enumerate(row["loss_mask"]) if m)


def test_warm_start_learns_the_masked_response_tokens(tmp_path: Path, capsys) -> None:
    data = tmp_path / "steps"
    data.mkdir()
    rows = write_batch(data / "1.msgpack")
    holdout = tmp_path / "holdout.txt"
    holdout.write_text("# held-out tasks\nheld-out\n")
    init = tmp_path / "init"
    assert init_main(["--preset", "tiny", "--seed", "5", "--out", str(init)]) == 0
    out = tmp_path / "warm"
    code = sft_main(
        ["--data", str(data), "--init", str(init), "--out", str(out), "--epochs", "40", "--lr", "1e-2", "--batch-tokens", "4096", "--holdout", str(holdout), "--seed", "1", "--log-every", "100"]
    )
    assert code == 0
    log = json.loads((out / "sft_log.json").read_text())
    assert log["data"]["examples"] == 4 and log["data"]["held_out"] == 2 and log["data"]["trained_tokens"] == 4 * 7
    losses = [s["loss"] for s in log["steps"]]
    assert losses[0] > 11 and losses[-1] < losses[0] / 2, losses[::10]
    before, after = load_pretrained(init), load_pretrained(out)
    for row in rows[:4]:
        assert response_logprob(after, row) > response_logprob(before, row) + 20
    # Masked tokens were never targets: the observation stays unlikely even though it repeats in every row.
    obs = rows[0]["tokens"][-6]
    with torch.no_grad():
        lp = torch.log_softmax(after.logits(after(torch.tensor([rows[0]["tokens"]]))), -1)[0]
    assert lp[len(rows[0]["tokens"]) - 7, obs].item() < -5
    assert "epoch 39: mean loss" in capsys.readouterr().out


def test_bad_input_exits_2_with_the_field(tmp_path: Path) -> None:
    data = tmp_path / "steps"
    data.mkdir()
    rows = write_batch(data / "1.msgpack")
    rows[3]["reward"] = None
    rows[3]["status"] = "failed"
    (data / "2.msgpack").write_bytes(msgpack.packb(rows))
    env = {"PYTHONPATH": str(SOURCES), "PATH": "/usr/bin:/bin"}
    cases = [
        ([str(data)], "2.msgpack: sample [3].reward: missing (status 'failed')"),
        ([str(tmp_path / "nowhere")], "no such file or folder"),
    ]
    for paths, message in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "vime_policy.sft", "--data", *paths, "--out", str(tmp_path / "o")],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "vime_policy.init", "--preset", "huge", "--out", str(tmp_path / "x")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
