"""SGLang's sampling params and sampler: validation, greedy, temperature, truncation, seeds, log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from vime_policy.sampling import ParamError, SamplingParams, sample

V = 50


def params(**kw) -> SamplingParams:
    return SamplingParams.from_json(kw, V)


def logits_rows(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * 3


def test_defaults_are_sglangs() -> None:
    p = params()
    assert (p.max_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 1.0, 1.0, -1, 0.0)
    assert p.skip_special_tokens and not p.ignore_eos and not p.no_stop_trim
    g = params(temperature=0)
    assert g.greedy and g.temperature == 1.0  # SGLang: greedy is top_k 1 at temperature 1


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"temperature": -0.1}, "temperature must be in"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"top_p": 0}, "top_p must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p must be in"),
        ({"top_k": 0}, "top_k must be -1"),
        ({"top_k": -5}, "top_k must be -1"),
        ({"min_p": 2}, "min_p must be in"),
        ({"max_new_tokens": -1}, "max_new_tokens must be at least 0"),
        ({"max_new_tokens": 1.5}, "max_new_tokens must be an integer"),
        ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
        ({"min_new_tokens": 9, "max_new_tokens": 4}, "must not exceed max_new_tokens"),
        ({"stop": [""]}, "stop must be a string or a list"),
        ({"stop": 5}, "stop must be a string or a list"),
        ({"stop_token_ids": [V]}, "stop_token_ids must be token ids in [0, 50)"),
        ({"stop_token_ids": ["1"]}, "stop_token_ids must be token ids"),
        ({"n": 2}, "n must be 1 here"),
        ({"repetition_penalty": 1.2}, "penalties are not implemented"),
        ({"frequency_penalty": 0.5}, "penalties are not implemented"),
        ({"json_schema": "{}"}, "json_schema is not supported"),
        ({"regex": "a+"}, "regex is not supported"),
        ({"temprature": 1.0}, "unknown field(s) ['temprature']"),
        ({"ignore_eos": "yes"}, "ignore_eos must be true or false"),
        ({"sampling_seed": "7"}, "sampling_seed must be an integer"),
    ],
)
def test_bad_params_name_the_field(bad: dict, message: str) -> None:
    with pytest.raises(ParamError) as e:
        params(**bad)
    assert message in str(e.value)
    with pytest.raises(ParamError, match="sampling_params must be an object"):
        SamplingParams.from_json([1], V)


def test_neutral_values_and_aliases_are_accepted() -> None:
    p = params(repetition_penalty=1.0, frequency_penalty=0, presence_penalty=0.0, stop="x", stop_token_ids=7, n=1, spaces_between_special_tokens=False)
    assert p.stop == ["x"] and p.stop_token_ids == [7]


def test_greedy_takes_the_argmax_and_scores_the_raw_logits() -> None:
    logits = logits_rows(4)
    tokens, lps, _ = sample(logits, [params(temperature=0)] * 4, [None] * 4, torch.Generator().manual_seed(0))
    assert tokens == logits.argmax(-1).tolist()
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).view(-1)
    assert torch.allclose(torch.tensor(lps), want)


@pytest.mark.parametrize("t", [0.3, 0.7, 1.0, 1.8])
def test_log_probs_are_of_the_temperature_scaled_distribution(t: float) -> None:
    logits = logits_rows(8, seed=1)
    tokens, lps, _ = sample(logits, [params(temperature=t)] * 8, [None] * 8, torch.Generator().manual_seed(1))
    want = torch.log_softmax(logits / t, -1).gather(1, torch.tensor(tokens)[:, None]).view(-1)
    assert torch.allclose(torch.tensor(lps), want, atol=1e-6)
    _, raw, _ = sample(logits, [params(temperature=t)] * 8, [None] * 8, torch.Generator().manual_seed(1), return_original=True)
    assert torch.allclose(torch.tensor(raw), torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).view(-1), atol=1e-6)


def test_top_p_and_top_k_truncate_but_log_probs_stay_untruncated() -> None:
    logits = (logits_rows(1, seed=2) / 3).expand(200, V).clone()
    order = logits[0].argsort(descending=True).tolist()
    probs = torch.softmax(logits[0], -1)
    # SGLang keeps a token while the mass before it is at most top_p.
    allowed = {t for i, t in enumerate(order) if probs[order[:i]].sum() <= 0.5}
    assert 1 < len(allowed) < V // 2
    tokens, lps, _ = sample(logits, [params(top_p=0.5)] * 200, [None] * 200, torch.Generator().manual_seed(2))
    assert set(tokens) <= allowed and len(set(tokens)) > 1
    assert all(math.isclose(lp, math.log(probs[t].item()), rel_tol=1e-5) for t, lp in zip(tokens, lps))
    tokens, _, _ = sample(logits, [params(top_k=3)] * 200, [None] * 200, torch.Generator().manual_seed(3))
    assert set(tokens) <= set(order[:3]) and len(set(tokens)) == 3
    tokens, _, _ = sample(logits[:5], [params(top_k=1, temperature=2.0)] * 5, [None] * 5, torch.Generator())
    assert set(tokens) == {order[0]}
    threshold = probs.max().item() * 0.4
    tokens, _, _ = sample(logits, [params(min_p=0.4)] * 200, [None] * 200, torch.Generator().manual_seed(4))
    assert all(probs[t].item() >= threshold for t in tokens)


def test_samples_follow_the_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0] + [-30.0] * (V - 4)])
    n = 20000
    tokens, _, _ = sample(logits.expand(n, V).clone(), [params()] * n, [None] * n, torch.Generator().manual_seed(5))
    freq = torch.bincount(torch.tensor(tokens), minlength=V)[:4].double() / n
    want = torch.softmax(logits[0, :4].double(), -1)
    assert (freq - want).abs().max() < 0.015


def test_seeded_rows_do_not_depend_on_their_neighbours() -> None:
    logits = logits_rows(1, seed=6)
    alone = []
    g = torch.Generator().manual_seed(42)
    for _ in range(5):
        alone.append(sample(logits, [params(sampling_seed=42)], [g], torch.Generator())[0][0])
    mixed = []
    g = torch.Generator().manual_seed(42)
    shared = torch.Generator().manual_seed(9)
    for step in range(5):
        rows = torch.cat([logits_rows(2, seed=100 + step), logits])
        ps = [params(), params(top_p=0.9), params(sampling_seed=42)]
        mixed.append(sample(rows, ps, [None, None, g], shared)[0][2])
    assert alone == mixed


def test_top_logprobs_are_the_k_most_likely() -> None:
    logits = logits_rows(2, seed=7)
    _, _, tops = sample(logits, [params(), params()], [None, None], torch.Generator(), top_logprobs=[3, 0])
    assert tops is not None and len(tops[0]) == 3 and tops[1] == []
    lp = torch.log_softmax(logits[0], -1)
    assert [i for _, i in tops[0]] == lp.topk(3).indices.tolist()
    assert all(math.isclose(v, lp[i].item(), rel_tol=1e-6) for v, i in tops[0])
