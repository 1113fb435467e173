"""A small reader and writer for the safetensors format (no PyPI package needed).

The format: an unsigned little-endian 64-bit header length N, then N bytes of UTF-8 JSON, then the data.
The JSON maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative
to the start of the data) and may hold a `__metadata__` map of strings. Data is raw little-endian,
row-major. The reader checks what the reference implementation checks: the header fits in the file,
every tensor's byte size matches its dtype and shape, and the tensors tile the data exactly (no gap, no
overlap, nothing after the last one). Errors name the file, the tensor and what is wrong.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from typing import Mapping

import torch

# safetensors dtype names -> torch dtypes this torch has (torch 1.13 has no uint16/32/64 or float8).
_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}
for _name, _attr in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _attr):
        _DTYPES[_name] = getattr(torch, _attr)
_NAMES = {v: k for k, v in _DTYPES.items()}
# The reference writer lays tensors out by dtype, in the reverse of its enum's order, then by name.
_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]

# The reference implementation refuses headers over 100 MB; so do we (a hostile length must not allocate).
MAX_HEADER_BYTES = 100_000_000


class SafetensorsError(ValueError):
    """The file is not valid safetensors; the message names the file, the tensor and the problem."""


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise SafetensorsError(f"duplicate key {key!r} in the header")
        out[key] = value
    return out


def parse_header(data: bytes | bytearray | memoryview, where: str = "<bytes>") -> tuple[dict, dict, int]:
    """Validate the header of a whole safetensors buffer.

    Returns (tensors: name -> {dtype, shape, data_offsets}, metadata, data start offset).
    """
    if sys.byteorder != "little":
        raise SafetensorsError("this reader supports little-endian machines only")
    if len(data) < 8:
        raise SafetensorsError(f"{where}: {len(data)} bytes is too short for a safetensors file (8-byte header length)")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"{where}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + n > len(data):
        raise SafetensorsError(f"{where}: header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except SafetensorsError as e:
        raise SafetensorsError(f"{where}: {e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{where}: the header is not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: the header must be a JSON object, found {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{where}: __metadata__ must map names to strings")
    data_len = len(data) - 8 - n
    spans = []
    for name, info in header.items():
        at = f"{where}: tensor {name!r}"
        if not isinstance(info, dict):
            raise SafetensorsError(f"{at}: expected an object with dtype, shape and data_offsets")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{at}: dtype {dtype!r} is not supported here (one of {sorted(_DTYPES)})")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SafetensorsError(f"{at}: shape must be a list of non-negative integers, found {shape!r}")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise SafetensorsError(f"{at}: data_offsets must be [begin, end] with 0 <= begin <= end, found {offsets!r}")
        numel = 1
        for d in shape:
            numel *= d
        expected = numel * _itemsize(_DTYPES[dtype])
        if offsets[1] - offsets[0] != expected:
            raise SafetensorsError(
                f"{at}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes, but {dtype} {shape} needs {expected}"
            )
        if offsets[1] > data_len:
            raise SafetensorsError(f"{at}: data_offsets {offsets} run past the end of the data ({data_len} bytes)")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            kind = "overlaps the previous tensor" if begin < end else f"leaves a gap of {begin - end} bytes before it"
            raise SafetensorsError(f"{where}: tensor {name!r} {kind} (data_offsets start at {begin}, expected {end})")
        end = stop
    if end != data_len:
        raise SafetensorsError(f"{where}: {data_len - end} bytes after the last tensor are not covered by the header")
    return header, metadata, 8 + n


def load_bytes(data: bytes | bytearray, where: str = "<bytes>") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Decode a whole safetensors buffer into CPU tensors (copies; the buffer can be dropped afterwards)."""
    header, metadata, start = parse_header(data, where)
    buf = data if isinstance(data, bytearray) else bytearray(data)
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        dtype = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if end == begin:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
            continue
        flat = torch.frombuffer(buf, dtype=dtype, count=(end - begin) // _itemsize(dtype), offset=start + begin)
        tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors, metadata


def load_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read every tensor of a `.safetensors` file onto the CPU."""
    return load_file_with_metadata(path)[0]


def load_file_with_metadata(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    return load_bytes(data, str(path))


def dump_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """Encode tensors as safetensors bytes, laid out and padded as the reference writer does."""
    header: dict[str, object] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    chunks: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError(f"tensor {name!r}: expected a torch.Tensor, found {type(t).__name__}")
        if t.dtype not in _NAMES:
            raise SafetensorsError(f"tensor {name!r}: dtype {t.dtype} has no safetensors name here")
    for name in sorted(tensors, key=lambda n: (-_ORDER.index(_NAMES[tensors[n].dtype]), n)):
        t = tensors[name]
        if t.layout != torch.strided or t.is_sparse:
            raise SafetensorsError(f"tensor {name!r}: only dense tensors can be saved")
        raw = _tensor_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    # Reinterpret the storage as bytes (numpy has no bfloat16, so go through uint8).
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def save_file(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Write a `.safetensors` file atomically (a reader never sees a half-written file)."""
    path = Path(path)
    data = dump_bytes(tensors, {"format": "pt", **(metadata or {})})
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
