"""Checks against the reference libraries' own output, waiting for their fixtures.

`fixtures/make_fixtures.py` writes the fixtures with safetensors, transformers and tokenizers (a GPU
machine of this project has them; this one has none). Once fixtures/safetensors/ and fixtures/hf-qwen3/
are committed with their provenance, rename this file to test_reference.py so that pytest runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from vime_policy.model import load_pretrained
from vime_policy.safetensors import dump_bytes, load_bytes, load_file_with_metadata

FIXTURES = Path(__file__).parent / "fixtures" / "safetensors"
HF = Path(__file__).parent / "fixtures" / "hf-qwen3"


def test_reads_files_written_by_the_reference_library() -> None:
    expected = json.loads((FIXTURES / "expected.json").read_text())
    for name, tensors in expected.items():
        loaded, meta = load_file_with_metadata(FIXTURES / name)
        assert set(loaded) == set(tensors["tensors"]), name
        assert meta == tensors["metadata"]
        for key, want in tensors["tensors"].items():
            t = loaded[key]
            assert str(t.dtype).replace("torch.", "") == want["dtype"], (name, key)
            assert list(t.shape) == want["shape"], (name, key)
            assert t.double().flatten().tolist() == want["values"], (name, key)


def test_writes_byte_identical_files_to_the_reference_library() -> None:
    """What we write for the fixture's tensors is what the reference library wrote for them."""
    for name in json.loads((FIXTURES / "expected.json").read_text()):
        original = (FIXTURES / name).read_bytes()
        tensors, meta = load_bytes(bytearray(original), name)
        assert dump_bytes(tensors, meta) == original, name


def test_matches_transformers_qwen3_logits() -> None:
    """Logits of checkpoints made and scored by transformers' Qwen3ForCausalLM (tied and untied)."""
    cases = json.loads((HF / "expected.json").read_text())
    assert len(cases) >= 2
    for case in cases:
        m = load_pretrained(HF / case["dir"], dtype=torch.float32)
        ids = torch.tensor(case["input_ids"])
        with torch.no_grad():
            logits = m.logits(m(ids))
        want = torch.tensor(case["logits"])
        assert logits.shape == want.shape
        err = (logits - want).abs().max().item()
        assert err < 2e-5 * max(1.0, want.abs().max().item()), (case["dir"], err)
