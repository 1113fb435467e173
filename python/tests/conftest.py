"""Shared fixtures: the bundled Qwen3 tokenizer, tiny checkpoints and a running engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from vime_policy.model import Qwen3Config, new_model, save_pretrained
from vime_policy.tokenizer import Detokenizer
from vime_testing import make_engine, tokenizer_dir


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


@pytest.fixture()
def engine(tiny_dir: Path, detok: Detokenizer):
    e = make_engine(tiny_dir, detok)
    yield e
    e.close()
