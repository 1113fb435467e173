"""SGLang's `sampling_params` and its sampler, with the log-probs SGLang returns.

Log-probs (SGLang's default, `sampler.py`): the sampled token's log-prob under softmax(logits / T), the
temperature-scaled distribution *before* top-k / top-p / min-p truncation. T = 0 is greedy and is
scored as T = 1 (SGLang turns temperature < 1e-6 into top_k = 1, temperature = 1). With
`SGLANG_RETURN_ORIGINAL_LOGPROB` (here: `--return-original-logprob`) the log-probs are of the raw
logits (T = 1) instead. At T = 1 and top_p = 1, the coding-agent loop's setting, all of these are the
same number: the log-prob of the distribution that was sampled, which a trainer recomputes with
log_softmax(logits).

Truncation follows SGLang's torch sampling path: probabilities sorted descending; drop a token when the
mass before it exceeds top_p, when its rank is >= top_k, or when it is below min_p x the top probability;
sample from what is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

SAMPLING_EPS = 1e-6


class ParamError(ValueError):
    """A request field is invalid; answered with 400 and this message."""


def _num(d: dict, key: str, default: float, lo: float | None = None, hi: float | None = None) -> float:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise ParamError(f"sampling_params.{key} must be a number, found {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ParamError(f"sampling_params.{key} must be in [{lo}, {hi}], found {v!r}")
    return float(v)


def _int(d: dict, key: str, default: int | None, lo: int | None = None) -> int | None:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ParamError(f"sampling_params.{key} must be an integer, found {v!r}")
    if lo is not None and v < lo:
        raise ParamError(f"sampling_params.{key} must be at least {lo}, found {v!r}")
    return v


def _bool(d: dict, key: str, default: bool) -> bool:
    v = d.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ParamError(f"sampling_params.{key} must be true or false, found {v!r}")
    return v


# Accepted with their neutral value only: they change the logits, and this server does not implement them.
_NEUTRAL = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
_UNSUPPORTED = ("json_schema", "regex", "ebnf", "structural_tag", "custom_params", "stop_regex", "logit_bias")
_ACCEPTED = {
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "min_new_tokens",
    "sampling_seed",
    "n",
    *_NEUTRAL,
    *_UNSUPPORTED,
}


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    min_new_tokens: int = 0
    sampling_seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.top_k == 1

    @property
    def truncates(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 1 or self.min_p > 0.0

    @classmethod
    def from_json(cls, d: Any, vocab_size: int) -> "SamplingParams":
        """Validate a request's `sampling_params` map; errors name the field and the value."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ParamError(f"sampling_params must be an object, found {type(d).__name__}")
        unknown = sorted(set(d) - _ACCEPTED)
        if unknown:
            raise ParamError(f"sampling_params: unknown field(s) {unknown}")
        for key in _UNSUPPORTED:
            if d.get(key) not in (None, {}, [], ""):
                raise ParamError(f"sampling_params.{key} is not supported by this server (constrained decoding)")
        for key, neutral in _NEUTRAL.items():
            if d.get(key) is not None and _num(d, key, neutral) != neutral:
                raise ParamError(f"sampling_params.{key}={d[key]!r}: penalties are not implemented here; send {neutral}")
        if _int(d, "n", 1, lo=1) != 1:
            raise ParamError("sampling_params.n must be 1 here; send n separate requests (each with its own rid)")
        stop = d.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise ParamError(f"sampling_params.stop must be a string or a list of non-empty strings, found {d.get('stop')!r}")
        stop_ids = d.get("stop_token_ids") or []
        if isinstance(stop_ids, int) and not isinstance(stop_ids, bool):
            stop_ids = [stop_ids]
        if not isinstance(stop_ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in stop_ids
        ):
            raise ParamError(f"sampling_params.stop_token_ids must be token ids in [0, {vocab_size}), found {d.get('stop_token_ids')!r}")
        p = cls(
            max_new_tokens=_int(d, "max_new_tokens", 128, lo=0),
            temperature=_num(d, "temperature", 1.0, lo=0.0),
            top_p=_num(d, "top_p", 1.0, lo=0.0, hi=1.0),
            top_k=_int(d, "top_k", -1),
            min_p=_num(d, "min_p", 0.0, lo=0.0, hi=1.0),
            stop=stop,
            stop_token_ids=stop_ids,
            ignore_eos=_bool(d, "ignore_eos", False),
            skip_special_tokens=_bool(d, "skip_special_tokens", True),
            no_stop_trim=_bool(d, "no_stop_trim", False),
            min_new_tokens=_int(d, "min_new_tokens", 0, lo=0),
            sampling_seed=_int(d, "sampling_seed", None),
        )
        _bool(d, "spaces_between_special_tokens", True)  # accepted; byte-level decoding has no such spaces
        if p.top_p <= 0.0:
            raise ParamError(f"sampling_params.top_p must be in (0, 1], found {p.top_p}")
        if p.top_k == 0 or p.top_k < -1:
            raise ParamError(f"sampling_params.top_k must be -1 (disabled) or at least 1, found {p.top_k}")
        if p.min_new_tokens > p.max_new_tokens:
            raise ParamError(
                f"sampling_params.min_new_tokens ({p.min_new_tokens}) must not exceed max_new_tokens ({p.max_new_tokens})"
            )
        if p.temperature < SAMPLING_EPS:  # SGLang: greedy is top_k = 1 at temperature 1
            p.temperature, p.top_k = 1.0, 1
        return p


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    shared: torch.Generator,
    return_original: bool = False,
    top_logprobs: list[int] | None = None,
) -> tuple[list[int], list[float], list[list[tuple[float, int]]] | None]:
    """Sample one token per row of float32 `logits` [B, V].

    Returns the tokens, their log-probs (see the module docstring) and, when `top_logprobs` asks for
    k > 0 in a row, that row's k most likely tokens as (log-prob, id). Rows with a `sampling_seed` draw
    from their own generator, so their samples do not depend on which other requests share the batch.
    """
    b = logits.shape[0]
    temps = torch.tensor([p.temperature for p in params], device=logits.device, dtype=torch.float32)
    scaled = logits / temps[:, None]
    logprobs = torch.log_softmax(scaled, dim=-1)
    tokens = torch.empty(b, dtype=torch.long, device=logits.device)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        idx = torch.tensor(greedy, device=logits.device)
        tokens[idx] = logits[idx].argmax(dim=-1)
    rest = [i for i, p in enumerate(params) if not p.greedy]
    if rest:
        tokens[torch.tensor(rest, device=logits.device)] = _draw(logprobs, rest, params, generators, shared)
    chosen_from = torch.log_softmax(logits, dim=-1) if return_original else logprobs
    chosen = chosen_from.gather(1, tokens[:, None]).view(-1).clamp(min=torch.finfo(torch.float32).min)
    tops = None
    if top_logprobs and any(k > 0 for k in top_logprobs):
        k_max = max(top_logprobs)
        values, ids = chosen_from.topk(k_max, dim=-1)
        values, ids = values.tolist(), ids.tolist()
        tops = [list(zip(values[i][:k], ids[i][:k])) for i, k in enumerate(top_logprobs)]
    return tokens.tolist(), chosen.tolist(), tops


def _draw(
    logprobs: torch.Tensor,
    rows: list[int],
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    shared: torch.Generator,
) -> torch.Tensor:
    """Sample the given rows. Only rows that ask for truncation are truncated (sorted), so a seeded row
    draws from the same probabilities whatever its neighbours ask for."""
    dev = logprobs.device
    picks = torch.empty(len(rows), dtype=torch.long, device=dev)
    for truncated in (False, True):
        js = [j for j, i in enumerate(rows) if params[i].truncates == truncated]
        if not js:
            continue
        probs = logprobs[[rows[j] for j in js]].exp()
        ids = None
        if truncated:
            probs, ids = _truncate(probs, [params[rows[j]] for j in js])
        got = torch.empty(len(js), dtype=torch.long, device=dev)
        unseeded = [k for k, j in enumerate(js) if generators[rows[j]] is None]
        if unseeded:
            u = torch.tensor(unseeded, device=dev)
            got[u] = torch.multinomial(probs[u], 1, generator=shared).view(-1)
        for k, j in enumerate(js):
            g = generators[rows[j]]
            if g is not None:
                got[k] = torch.multinomial(probs[k : k + 1], 1, generator=g).view(-1)[0]
        if ids is not None:
            got = ids.gather(1, got[:, None]).view(-1)
        picks[torch.tensor(js, device=dev)] = got
    return picks


def _truncate(probs: torch.Tensor, params: list[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero out tokens outside top-k / top-p / min-p (SGLang's torch path); returns (sorted probs, ids)."""
    dev = probs.device
    top_p = torch.tensor([p.top_p for p in params], device=dev)
    top_k = torch.tensor([p.top_k if p.top_k > 0 else probs.shape[-1] for p in params], device=dev)
    min_p = torch.tensor([p.min_p for p in params], device=dev)
    sorted_probs, ids = probs.sort(dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs[mass_before > top_p[:, None]] = 0.0
    sorted_probs[torch.arange(probs.shape[-1], device=dev)[None, :] >= top_k[:, None]] = 0.0
    sorted_probs[sorted_probs < (sorted_probs[:, :1] * min_p[:, None])] = 0.0
    return sorted_probs, ids
