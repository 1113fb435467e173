"""The safetensors reader/writer: round trips, the exact byte layout, and hostile files in many spellings.
(Files written by the reference library: reference_checks.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from vime_policy.safetensors import (
    SafetensorsError,
    dump_bytes,
    load_bytes,
    load_file,
    load_file_with_metadata,
    save_file,
)


def raw(header: dict, data: bytes = b"", pad: bool = True) -> bytes:
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool],
)
def test_round_trip_every_dtype(dtype: torch.dtype, tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    t = (torch.randn(3, 5, generator=g) * 100).to(dtype) if dtype != torch.bool else torch.rand(3, 5, generator=g) > 0.5
    tensors = {"a": t, "scalar": t[0, 0].clone(), "empty": t[:0], "strided": t.t()}
    save_file(tensors, tmp_path / "x.safetensors")
    back = load_file(tmp_path / "x.safetensors")
    assert set(back) == set(tensors)
    for name, value in tensors.items():
        assert back[name].dtype == dtype and back[name].shape == value.shape
        assert torch.equal(back[name], value), name


def test_byte_layout_follows_the_format(tmp_path: Path) -> None:
    data = dump_bytes({"b": torch.tensor([1.0, -2.0], dtype=torch.float32), "a": torch.tensor([7], dtype=torch.int64)}, {"k": "v"})
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
    header = json.loads(data[8 : 8 + n])
    assert header == {
        "__metadata__": {"k": "v"},
        "a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
    }
    assert data[8 + n :] == struct.pack("<q", 7) + struct.pack("<2f", 1.0, -2.0)
    save_file({"x": torch.zeros(2)}, tmp_path / "m.safetensors", {"step": "3"})
    _, meta = load_file_with_metadata(tmp_path / "m.safetensors")
    assert meta == {"format": "pt", "step": "3"}


_DUPLICATE = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
HOSTILE = [
    (b"", "too short"),
    (b"\x01\x00\x00", "too short"),
    (struct.pack("<Q", 1 << 40) + b"{}", "exceeds"),
    (struct.pack("<Q", 64) + b"{}", "runs past the end"),
    (struct.pack("<Q", 4) + b"nope", "not UTF-8 JSON"),
    (struct.pack("<Q", 2) + b"\xff\xfe", "not UTF-8 JSON"),
    (raw([1, 2]), "must be a JSON object"),  # type: ignore[arg-type]
    (struct.pack("<Q", len(_DUPLICATE)) + _DUPLICATE + b"\0" * 4, "duplicate key"),
    (raw({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "dtype 'F33'"),
    (raw({"a": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}}, b"\0" * 2), "dtype 'U16'"),
    (raw({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4), "shape must be"),
    (raw({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}, b"\0" * 4), "shape must be"),
    (raw({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}}, b"\0" * 4), "shape must be"),
    (raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4), "needs 8"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4), "data_offsets must be"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, b"\0" * 4), "data_offsets must be"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, True]}}, b"\0" * 4), "data_offsets must be"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 4), "run past the end"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 8), "overlaps"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, b"\0" * 12), "gap of 4"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 9), "5 bytes after the last tensor"),
    (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "gap of 4"),
    (raw({"__metadata__": {"k": 1}}), "__metadata__"),
    (raw({"a": "F32"}), "expected an object"),
]


@pytest.mark.parametrize("data,message", HOSTILE)
def test_rejects_hostile_files_by_name(data: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(SafetensorsError, match="bad.safetensors") as e:
        load_file(path)
    assert message in str(e.value)


def test_truncated_copies_of_a_valid_file_are_all_rejected(tmp_path: Path) -> None:
    good = dump_bytes({"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(3)})
    for cut in range(len(good)):
        with pytest.raises(SafetensorsError):
            load_bytes(good[:cut])
    assert set(load_bytes(good)[0]) == {"w", "b"}


def test_write_is_atomic_and_refuses_what_it_cannot_store(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(2)}, path)
    with pytest.raises(SafetensorsError, match="complex"):
        save_file({"a": torch.ones(2, dtype=torch.complex64)}, path)
    with pytest.raises(SafetensorsError, match="expected a torch.Tensor"):
        save_file({"a": [1, 2]}, path)  # type: ignore[dict-item]
    assert torch.equal(load_file(path)["a"], torch.ones(2))  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]  # no temporary left behind
