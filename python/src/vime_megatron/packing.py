"""Pack samples into micro-batches of one row each, and read per-sample log probs back out.

megatron.core's local (non-TransformerEngine) attention has no THD / `cu_seqlens` path, so several
samples share one row through an explicit block-diagonal causal mask: a token attends only to earlier
tokens of its own sample. Padding is a segment of its own. RoPE depends only on relative position, so
positions need not restart per sample; they restart anyway, which is what a varlen kernel would see.
The mask is `[1, 1, T, T]`, so memory grows with T² per micro-batch: right for demos and short
samples, not for long agent contexts (use TransformerEngine's THD attention there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedRow:
    """One micro-batch: the rollout positions it holds and the tensors the model takes."""

    positions: list[int]  # rollout positions, in row order
    offsets: list[int]  # start of each sample in the row
    tokens: torch.Tensor  # int64 [1, T]
    position_ids: torch.Tensor  # int64 [1, T]
    attention_mask: torch.Tensor  # bool [1, 1, T, T], True = masked out (Megatron's convention)
    used: int  # tokens that belong to samples; the rest is padding


def pack_microbatches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Split sample indices into micro-batches of at most `max_tokens` tokens (first-fit decreasing).

    A sample longer than `max_tokens` gets a micro-batch of its own. Micro-batches are ordered by their
    first rollout position and hold their indices in rollout order, so the layout is deterministic.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(max_tokens - n)
    return sorted((sorted(b) for b in bins), key=lambda b: b[0])


def block_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """`[1, 1, T, T]` bool mask from per-token segment ids: True where query t must not see key s."""
    same = segments[:, None] == segments[None, :]
    causal = torch.ones(len(segments), len(segments), dtype=torch.bool).tril()
    return ~(same & causal)[None, None]


def build_row(positions: list[int], token_lists: list[list[int]], pad_multiple: int = 128, pad_id: int = 0) -> PackedRow:
    """Concatenate the samples at `positions` (their token lists) into one padded row."""
    tokens: list[int] = []
    position_ids: list[int] = []
    segments: list[int] = []
    offsets: list[int] = []
    for seg, toks in enumerate(token_lists):
        offsets.append(len(tokens))
        tokens.extend(toks)
        position_ids.extend(range(len(toks)))
        segments.extend([seg] * len(toks))
    used = len(tokens)
    length = -(-used // pad_multiple) * pad_multiple
    pad = length - used
    tokens.extend([pad_id] * pad)
    position_ids.extend(range(pad))
    segments.extend([-1] * pad)
    return PackedRow(
        positions=list(positions),
        offsets=offsets,
        tokens=torch.tensor([tokens], dtype=torch.long),
        position_ids=torch.tensor([position_ids], dtype=torch.long),
        attention_mask=block_causal_mask(torch.tensor(segments)),
        used=used,
    )


def next_token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token[t+1] | row[:t+1]) for every t of a `[1, T, V]` logits row, in float32: `[T - 1]`."""
    logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
    return logp.gather(-1, tokens[0, 1:, None].to(logp.device)).squeeze(-1)


def response_slices(row: PackedRow, total_lengths: list[int], response_lengths: list[int]) -> list[slice]:
    """For each sample in the row, the slice of `next_token_log_probs` that scores its response tokens.

    Response token j of a sample at offset o with prompt length P sits at o + P + j and is predicted at
    o + P + j - 1, so the slice is [o + P - 1, o + L - 1).
    """
    out = []
    for offset, total, n in zip(row.offsets, total_lengths, response_lengths):
        start = offset + total - n - 1
        out.append(slice(start, start + n))
    return out
