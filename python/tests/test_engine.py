"""The engine on the tiny model: continuous batching, log-probs against teacher forcing, finish reasons,
abort, pause/continue in its three modes, and weight updates with versions."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from vime_policy.engine import EngineError
from vime_policy.model import load_pretrained
from vime_testing import make_engine, run, submit, wait, wait_until

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198]


def score(path: Path, ids: list[int], start: int) -> list[float]:
    """log p(ids[j] | ids[:j]) for j >= start, by a full forward pass of a freshly loaded model."""
    m = load_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        lp = torch.log_softmax(m.logits(m(torch.tensor([ids]))), -1)[0]
    return [lp[j - 1, ids[j]].item() for j in range(start, len(ids))]


def test_log_probs_are_those_of_the_sampled_distribution(engine, tiny_dir: Path) -> None:
    req = run(engine, PROMPT, max_new_tokens=24, sampling_seed=1)
    assert req.finish == {"type": "length", "length": 24}
    assert len(req.output_ids) == len(req.output_logprobs) == 24
    want = score(tiny_dir, PROMPT + req.output_ids, len(PROMPT))
    assert max(abs(a - b) for a, b in zip(req.output_logprobs, want)) < 1e-4
    hot = run(engine, PROMPT, max_new_tokens=8, sampling_seed=1, temperature=0.5)
    m = load_pretrained(tiny_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = m.logits(m(torch.tensor([PROMPT + hot.output_ids])))[0]
    scaled = torch.log_softmax(logits / 0.5, -1)
    want = [scaled[len(PROMPT) - 1 + k, t].item() for k, t in enumerate(hot.output_ids)]
    assert max(abs(a - b) for a, b in zip(hot.output_logprobs, want)) < 1e-4


def test_same_seed_same_tokens_and_prompt_scoring(engine, tiny_dir: Path) -> None:
    a = run(engine, PROMPT, max_new_tokens=16, sampling_seed=7)
    b = run(engine, PROMPT, max_new_tokens=16, sampling_seed=7)
    c = run(engine, PROMPT, max_new_tokens=16, sampling_seed=8)
    assert a.output_ids == b.output_ids and a.output_logprobs == b.output_logprobs
    assert a.output_ids != c.output_ids
    scored = run(engine, PROMPT, max_new_tokens=0, logprob_start_len=0)
    assert scored.finish == {"type": "length", "length": 0} and scored.output_ids == []
    assert scored.input_logprobs[0] is None and len(scored.input_logprobs) == len(PROMPT)
    want = score(tiny_dir, PROMPT, 1)
    assert max(abs(x - y) for x, y in zip(scored.input_logprobs[1:], want)) < 1e-4


def test_requests_join_between_decode_steps_and_leave_when_done(tiny_dir: Path, detok) -> None:
    e = make_engine(tiny_dir, detok, max_running=4)
    try:
        long = submit(e, PROMPT, max_new_tokens=400, ignore_eos=True, sampling_seed=3)
        wait_until(lambda: len(long.output_ids) >= 20)
        # Different lengths, so requests finish at different steps and survivors move into freed rows.
        lengths = [10 + 7 * i for i in range(6)]
        short = [submit(e, PROMPT[: 5 + i], max_new_tokens=n, ignore_eos=True, sampling_seed=i) for i, n in enumerate(lengths)]
        for r, n in zip(short, lengths):
            wait(r)
            assert r.finish == {"type": "length", "length": n}
        # The short ones were admitted while the long one was decoding and finished before it.
        assert not long.done and e.stats["peak_running"] == 4
        wait(long)
        for r in [long, *short]:
            want = score(tiny_dir, r.input_ids + r.output_ids, len(r.input_ids))
            assert max(abs(a - b) for a, b in zip(r.output_logprobs, want)) < 1e-4, r.rid
        snap = e.snapshot()
        assert snap["num_running_reqs"] == 0 and snap["num_waiting_reqs"] == 0
        assert snap["generation_tokens"] == 400 + sum(lengths)
    finally:
        e.close()


def test_finish_reasons(engine, detok) -> None:
    req = run(engine, PROMPT, max_new_tokens=30, sampling_seed=11)
    stop_at = req.output_ids[4]
    cut = run(engine, PROMPT, max_new_tokens=30, sampling_seed=11, stop_token_ids=[stop_at])
    assert cut.finish == {"type": "stop", "matched": stop_at}
    assert cut.output_ids == req.output_ids[: req.output_ids.index(stop_at) + 1]
    ignored = run(engine, PROMPT, max_new_tokens=30, sampling_seed=11, stop_token_ids=[stop_at], ignore_eos=True)
    assert ignored.finish["type"] == "length" and ignored.output_ids == req.output_ids
    text = detok.decode(req.output_ids[:8])
    needle = text[-3:]
    by_text = run(engine, PROMPT, max_new_tokens=30, sampling_seed=11, stop=[needle])
    assert by_text.finish == {"type": "stop", "matched": needle}
    assert needle in detok.decode(by_text.output_ids) and needle not in detok.decode(by_text.output_ids[:-1])
    # At max_new_tokens the length check wins over a matched stop token, as in SGLang.
    exact = run(engine, PROMPT, max_new_tokens=5, sampling_seed=11, stop_token_ids=[req.output_ids[4]])
    assert exact.finish == {"type": "length", "length": 5}


def test_min_new_tokens_masks_stop_tokens(tiny_dir: Path, detok) -> None:
    e = make_engine(tiny_dir, detok)
    try:
        e.eos_token_ids = set(range(0, 151936, 2))  # half the vocabulary ends the sequence
        quick = run(e, PROMPT, max_new_tokens=20, sampling_seed=5)
        assert quick.finish["type"] == "stop" and len(quick.output_ids) < 20
        held = run(e, PROMPT, max_new_tokens=20, sampling_seed=5, min_new_tokens=10)
        assert len(held.output_ids) >= 10 and all(t % 2 == 1 for t in held.output_ids[:9])
    finally:
        e.close()


def test_refuses_what_it_cannot_serve(engine) -> None:
    cases = [
        ([], {}, "input_ids is empty"),
        ([151936], {}, "outside the vocabulary"),
        ([-1], {}, "outside the vocabulary"),
        ([1] * 4096, {}, "longer than the model's context length (4096 tokens)"),
        ([1] * 4000, {"max_new_tokens": 200}, "exceeds the model's maximum context length of 4096"),
    ]
    for ids, params, message in cases:
        with pytest.raises(EngineError) as e:
            submit(engine, ids, **params)
        assert message in str(e.value)
    a = submit(engine, PROMPT, rid="dup", max_new_tokens=200, ignore_eos=True)
    with pytest.raises(EngineError, match="already in flight"):
        submit(engine, PROMPT, rid="dup")
    engine.abort("dup")
    wait(a)


def test_abort_running_and_waiting(tiny_dir: Path, detok) -> None:
    e = make_engine(tiny_dir, detok, max_running=1)
    try:
        running = submit(e, PROMPT, max_new_tokens=2000, ignore_eos=True)
        waiting = submit(e, PROMPT, max_new_tokens=5)
        wait_until(lambda: len(running.output_ids) > 3)
        e.abort(waiting.rid)
        wait(waiting)
        assert waiting.finish["type"] == "abort" and waiting.output_ids == []
        e.abort(running.rid)
        wait(running)
        assert running.finish["type"] == "abort" and 3 < len(running.output_ids) < 2000
        assert len(running.output_logprobs) == len(running.output_ids)
        after = run(e, PROMPT, max_new_tokens=3)
        assert after.finish["type"] == "length"
        e.abort("no-such-request")  # ignored
        many = [submit(e, PROMPT, max_new_tokens=500, ignore_eos=True) for _ in range(3)]
        e.abort(abort_all=True)
        for r in many:
            assert wait(r).finish["type"] == "abort"
        assert e.snapshot()["num_running_reqs"] == 0
    finally:
        e.close()


@pytest.mark.parametrize("mode", ["in_place", "retract"])
def test_pause_keeps_requests_and_continue_finishes_them(mode: str, tiny_dir: Path, detok) -> None:
    e = make_engine(tiny_dir, detok)
    try:
        reqs = [submit(e, PROMPT, max_new_tokens=300, ignore_eos=True, sampling_seed=i) for i in range(3)]
        wait_until(lambda: all(len(r.output_ids) > 5 for r in reqs))
        e.pause(mode)
        frozen = [len(r.output_ids) for r in reqs]
        late = submit(e, PROMPT, max_new_tokens=4)
        time.sleep(0.3)
        assert [len(r.output_ids) for r in reqs] == frozen and not late.done  # nothing moves while paused
        e.resume()
        for r in [*reqs, late]:
            wait(r)
        assert all(len(r.output_ids) == 300 and r.finish["type"] == "length" for r in reqs)
        assert all(r.retractions == (1 if mode == "retract" else 0) for r in reqs)
        for r in reqs:  # retracted requests were re-prefilled from prompt + output, with the same weights
            want = score(tiny_dir, r.input_ids + r.output_ids, len(r.input_ids))
            assert max(abs(a - b) for a, b in zip(r.output_logprobs, want)) < 1e-4
    finally:
        e.close()


def test_pause_abort_aborts_everything_and_holds_new_requests(tiny_dir: Path, detok) -> None:
    e = make_engine(tiny_dir, detok)
    try:
        reqs = [submit(e, PROMPT, max_new_tokens=500, ignore_eos=True) for _ in range(2)]
        wait_until(lambda: all(r.output_ids for r in reqs))
        e.pause("abort")
        assert all(r.done and r.finish["type"] == "abort" for r in reqs)
        held = submit(e, PROMPT, max_new_tokens=3)
        time.sleep(0.2)
        assert not held.done
        e.resume()
        assert wait(held).finish["type"] == "length"
    finally:
        e.close()


def test_weight_update_waits_for_running_requests_and_changes_the_version(tiny_dir: Path, tiny_dir_other: Path, detok) -> None:
    e = make_engine(tiny_dir, detok)
    try:
        before = run(e, PROMPT, max_new_tokens=6, sampling_seed=2)
        inflight = submit(e, PROMPT, max_new_tokens=150, ignore_eos=True, sampling_seed=2)
        wait_until(lambda: len(inflight.output_ids) > 2)
        result: list = []
        t = threading.Thread(target=lambda: result.append(e.update_weights(str(tiny_dir_other), "v1", False, True)))
        t.start()
        time.sleep(0.05)
        arriving = submit(e, PROMPT, max_new_tokens=6, sampling_seed=2)  # waits behind the update
        t.join(60)
        assert result == [(True, "Succeeded to update model weights. Weight version updated to v1.", 0)]
        assert inflight.done and inflight.finish["type"] == "length"  # finished on the old weights first
        want_old = score(tiny_dir, PROMPT + inflight.output_ids, len(PROMPT))
        assert max(abs(a - b) for a, b in zip(inflight.output_logprobs, want_old)) < 1e-4
        wait(arriving)
        want_new = score(tiny_dir_other, PROMPT + arriving.output_ids, len(PROMPT))
        assert max(abs(a - b) for a, b in zip(arriving.output_logprobs, want_new)) < 1e-4
        assert e.weight_version == "v1" and e.model_path == str(tiny_dir_other)
        assert arriving.output_logprobs != before.output_logprobs
    finally:
        e.close()


def test_weight_update_while_paused_applies_at_once(tiny_dir: Path, tiny_dir_other: Path, detok) -> None:
    e = make_engine(tiny_dir, detok)
    try:
        r = submit(e, PROMPT, max_new_tokens=200, ignore_eos=True)
        wait_until(lambda: len(r.output_ids) > 2)
        e.pause("in_place")
        ok, message, paused = e.update_weights(str(tiny_dir_other), "v2", False, True)
        assert ok and paused == 1 and e.weight_version == "v2"
        e.resume()
        assert wait(r).finish["type"] == "length"
        ok, _, _ = e.update_weights(str(tiny_dir), None, True, True)  # no version given: kept
        assert ok and e.weight_version == "v2"
    finally:
        e.close()


def test_failed_weight_updates_change_nothing(tiny_dir: Path, tmp_path: Path, detok) -> None:
    from vime_policy.model import Qwen3Config, new_model, save_pretrained

    e = make_engine(tiny_dir, detok)
    try:
        before = run(e, PROMPT, max_new_tokens=6, sampling_seed=4)
        other = tmp_path / "other-shape"
        save_pretrained(new_model(Qwen3Config.preset("tiny", num_hidden_layers=3), 0), other)
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "config.json").write_text((tiny_dir / "config.json").read_text())
        (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
        for path, message in [
            (tmp_path / "missing", "no config.json"),
            (other, "different model shape"),
            (broken, "runs past the end"),
        ]:
            ok, msg, _ = e.update_weights(str(path), "bad", False, True)
            assert not ok and message in msg, msg
        assert e.weight_version == "default"
        after = run(e, PROMPT, max_new_tokens=6, sampling_seed=4)
        assert after.output_ids == before.output_ids and after.output_logprobs == before.output_logprobs
    finally:
        e.close()


def test_flush_cache_is_refused_while_requests_run(engine) -> None:
    assert engine.flush_cache()
    r = submit(engine, PROMPT, max_new_tokens=500, ignore_eos=True)
    wait_until(lambda: len(r.output_ids) > 0)
    assert not engine.flush_cache()
    engine.abort(r.rid)
    wait(r)
    assert engine.flush_cache()
