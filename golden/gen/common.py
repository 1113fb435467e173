"""Shared inputs and the file format of the golden vectors (one case per JSON file)."""

import json
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.abspath(os.path.join(HERE, ".."))

# The reward sets of the slime golden files (../slime), reused so every trainer sees the same inputs.
GROUP_SETS = {
    "binary_g8": (
        8,
        [1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        + [1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
    ),
    "binary_g4": (4, [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1]),
    "continuous_g4": (4, [0.1, 0.5, 0.9, 0.3, -1.0, 2.5, 0.0, 0.75, 0.3333, 0.6667, 0.1234, 0.9876, 0.5, 0.5, 0.5, 0.5]),
    "g2": (2, [0.0, 1.0, 1.0, 1.0, 0.2, 0.7, 0.0, 0.0, -3.0, 5.0]),
    "g1": (1, [1.0, 0.0, 0.5, -2.0]),
    "large_magnitude_g4": (4, [1e6, 1e6 + 1, 1e6 + 2, 1e6 + 3, 1000.0, -1000.0, 500.0, 0.0, 1e4, 2e4, 3e4, 4e4]),
    "small_magnitude_g4": (4, [1e-7, 2e-7, 3e-7, 4e-7, 0.0, 1e-6, 0.0, 1e-6, 1e-3, 0.0, 0.0, 0.0, 1e-5, 1e-5, 1e-5, 1e-5]),
}


def token_batch():
    """Eight responses in two groups of four, right-padded to 10 tokens like verl's [B, T] tensors.

    Masks hold a tool-observation span (0) inside a response, trailing 0s, and one response whose mask
    is all 0 (index 6). Per-token values are seeded random numbers rounded to 6 decimals."""
    lengths = [6, 9, 3, 8, 5, 7, 4, 9]
    masks = [
        [1, 1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0, 1, 1, 1, 1],
        [1, 1, 1],
        [1, 1, 1, 0, 0, 1, 1, 0],
        [1, 1, 1, 1, 0],
        [1, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0, 1],
    ]
    g = torch.Generator().manual_seed(19)

    def rnd(lo, hi):
        return [[round(lo + (hi - lo) * float(torch.rand(1, generator=g)), 6) for _ in range(n)] for n in lengths]

    return {
        "response_lengths": lengths,
        "padded_length": 10,
        "loss_masks": masks,
        "uid": ["a", "a", "a", "a", "b", "b", "b", "b"],
        "scores": [1.0, 0.0, 0.0, 1.0, 0.5, 0.2, 0.9, 0.0],
        "log_probs": rnd(-2.5, -0.05),
        "old_log_probs": rnd(-2.5, -0.05),
        "ref_log_probs": rnd(-2.5, -0.05),
        "values": rnd(-0.5, 0.8),
        "sum_pi_squared": rnd(0.05, 0.9),
    }


def padded(rows, width, fill=0.0, dtype=torch.float32):
    """Right-pad per-response rows into a [B, width] tensor."""
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def unpad(t, lengths):
    """Per-response rows (lists) of a [B, T] tensor, dropping the padding."""
    return [t[i, :n].tolist() for i, n in enumerate(lengths)]


def _clean(value):
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def write(folder, name, source, description, params, inputs, expected, dtype="float32"):
    os.makedirs(os.path.join(GOLDEN, folder), exist_ok=True)
    doc = {
        "source": source,
        "case": name,
        "description": description,
        "params": _clean(params),
        "inputs": _clean(inputs),
        "expected": _clean(expected),
        "dtype": dtype,
    }
    with open(os.path.join(GOLDEN, folder, name + ".json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    return name


def error_of(fn):
    """Run fn; return {"error": type, "message": text} if it raises, else None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the golden records whatever upstream raises
        return {"error": type(e).__name__, "message": str(e)}
    return None
