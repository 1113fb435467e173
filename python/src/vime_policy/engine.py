"""The inference engine: continuous batching over a KV cache, pause/continue, abort and weight updates.

One scheduler thread owns the model and the cache. Each iteration it (1) finishes aborted requests,
(2) applies a pending weight update once no request is running (or at once while paused), (3) admits
waiting requests up to `max_running` (chunked prefill, then the first token is sampled), and (4) runs one
decode step for every running request together. New requests therefore join between decode steps and
finished ones leave at once; their cache rows are reused. HTTP threads only enqueue requests, set flags
and wait on a request's condition variable; all model and cache state is touched by this thread alone.

Semantics follow SGLang's scheduler and tokenizer manager:
- a request finishes on a stop token (the model's eos ids plus `stop_token_ids`, unless `ignore_eos`),
  a `stop` string, or `max_new_tokens` (checked first), with SGLang's finish_reason objects;
- `/abort_request` ends a request with what it has generated and `finish_reason.type == "abort"`;
- `/update_weights_from_disk` waits for running requests to finish (new ones wait behind it), unless
  the engine is paused, in which case it applies at once; it aborts everything first when
  `abort_all_requests` is set;
- `/pause_generation` modes: `abort` (abort every request, hold new ones), `retract` (drop the running
  requests' cache and requeue them: they are re-prefilled on continue), `in_place` (freeze with the cache
  kept); `/continue_generation` resumes.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from .model import CheckpointError, KVCache, Qwen3ForCausalLM, load_state_into, read_config, read_state
from .sampling import ParamError, SamplingParams, sample
from .tokenizer import Detokenizer

log = logging.getLogger("vime_policy")


@dataclass(eq=False)  # requests are compared by identity (they sit in queues)
class Request:
    rid: str
    input_ids: list[int]
    params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    # --- state, written by the scheduler thread only ---
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)
    input_logprobs: list[float | None] | None = None
    input_top: list[list[tuple[float, int]] | None] | None = None
    finish: dict[str, Any] | None = None
    error: str | None = None  # an engine failure (answered 500), not a finish reason
    cached: int = 0  # tokens whose keys/values are in the cache row
    retractions: int = 0
    generator: torch.Generator | None = None
    created: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_at: float | None = None
    cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @property
    def done(self) -> bool:
        return self.finish is not None or self.error is not None

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()


@dataclass
class _Update:
    model_path: str
    weight_version: str | None
    flush_cache: bool
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[bool, str, int] = (False, "", 0)


class EngineError(ValueError):
    """A request the engine refuses (answered 400)."""


class Engine:
    def __init__(
        self,
        model: Qwen3ForCausalLM,
        model_path: str,
        *,
        eos_token_ids: list[int],
        detokenizer: Detokenizer | None = None,
        device: torch.device,
        max_running: int = 16,
        context_length: int | None = None,
        chunk_size: int = 2048,
        seed: int = 0,
        weight_version: str = "default",
        return_original_logprob: bool = False,
        decode_log_interval: int = 40,
    ):
        self.model, self.model_path, self.device = model, model_path, device
        self.config = model.config
        self.dtype = next(model.parameters()).dtype
        self.eos_token_ids = set(eos_token_ids)
        self.detokenizer = detokenizer
        self.max_running = max_running
        self.context_length = min(context_length or self.config.max_position_embeddings, self.config.max_position_embeddings)
        self.chunk_size = chunk_size
        self.weight_version = weight_version
        self.return_original_logprob = return_original_logprob
        self.decode_log_interval = decode_log_interval
        self.cache = KVCache(self.config, max_running, self.context_length, device, self.dtype)
        self.shared_generator = torch.Generator(device=device).manual_seed(seed)
        self.seed = seed
        self._lock = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []  # row i of the cache belongs to _running[i]
        self._by_rid: dict[str, Request] = {}
        self._aborts: set[str] = set()
        self._abort_all = False
        self._paused: str | None = None
        self._update: _Update | None = None
        self._stop = False
        self.stats = {
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "finished": 0,
            "aborted": 0,
            "decode_steps": 0,
            "peak_running": 0,
            "weight_updates": 0,
        }
        self._last_step_at = time.monotonic()
        self._log_tokens, self._log_at = 0, time.monotonic()
        self._rid_counter = itertools.count()
        self.thread = threading.Thread(target=self._loop, name="vime-policy-scheduler", daemon=True)
        self.thread.start()

    # ---- called from HTTP threads -------------------------------------------------------------------

    def new_rid(self) -> str:
        return f"vime-policy-{next(self._rid_counter)}-{time.time_ns():x}"

    def submit(self, req: Request) -> None:
        vocab = self.config.vocab_size
        if not req.input_ids:
            raise EngineError("input_ids is empty; send at least one token id")
        bad = next((t for t in req.input_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineError(f"input_ids: token id {bad} is outside the vocabulary [0, {vocab})")
        n, m = len(req.input_ids), req.params.max_new_tokens
        if n >= self.context_length:
            raise EngineError(
                f"The input ({n} tokens) is longer than the model's context length ({self.context_length} tokens)."
            )
        if n + m > self.context_length:
            raise EngineError(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} tokens. "
                f"You requested a total of {n + m} tokens: {n} tokens from the input messages and {m} tokens for "
                "the completion. Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        if req.logprob_start_len >= n:
            raise EngineError(f"logprob_start_len ({req.logprob_start_len}) must be below the input length ({n})")
        if req.params.stop and self.detokenizer is None:
            raise EngineError("sampling_params.stop needs a tokenizer; start the server with --tokenizer-path")
        if req.params.sampling_seed is not None:
            req.generator = torch.Generator(device=self.device).manual_seed(req.params.sampling_seed)
        with self._lock:
            if self._stop:
                raise EngineError("the server is shutting down")
            if req.rid in self._by_rid:
                raise EngineError(f"rid {req.rid!r} is already in flight; use a unique request id")
            self._by_rid[req.rid] = req
            self._waiting.append(req)
            self._lock.notify_all()

    def abort(self, rid: str | None = None, abort_all: bool = False) -> None:
        with self._lock:
            if abort_all:
                self._abort_all = True
            elif rid is not None and rid in self._by_rid:
                self._aborts.add(rid)
            self._lock.notify_all()

    def pause(self, mode: str) -> None:
        if mode not in ("abort", "retract", "in_place"):
            raise ParamError(f"mode must be 'abort', 'retract' or 'in_place', found {mode!r}")
        done = threading.Event()
        with self._lock:
            self._paused = mode
            if mode == "abort":
                self._abort_all = True
            self._pause_ack = done
            self._lock.notify_all()
        done.wait()

    def resume(self) -> None:
        with self._lock:
            self._paused = None
            self._lock.notify_all()

    def update_weights(self, model_path: str, weight_version: str | None, abort_all: bool, flush_cache: bool) -> tuple[bool, str, int]:
        job = _Update(model_path, weight_version, flush_cache)
        with self._lock:
            if self._update is not None:
                return False, "another weight update is in progress", 0
            if abort_all:
                self._abort_all = True
            self._update = job
            self._lock.notify_all()
        job.done.wait()
        return job.result

    def flush_cache(self) -> bool:
        """Free the cache; refused (False) while requests are running or waiting, as SGLang does."""
        done = threading.Event()
        result = [False]
        with self._lock:
            if self._running or self._waiting:
                return False
            self._flush = (done, result)
            self._lock.notify_all()
        done.wait()
        return result[0]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            running, waiting = len(self._running), len(self._waiting)
            tokens = sum(r.cached for r in self._running)
        return {
            **self.stats,
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "num_used_tokens": tokens,
            "token_usage": tokens / (self.max_running * self.context_length),
            "paused": self._paused,
            "weight_version": self.weight_version,
            "kv_cache_bytes": self.cache.used_bytes(),
            "last_step_age_s": time.monotonic() - self._last_step_at,
            "alive": self.thread.is_alive(),
        }

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._abort_all = True
            self._lock.notify_all()
        self.thread.join(timeout=30)

    # ---- the scheduler thread -----------------------------------------------------------------------

    _pause_ack: threading.Event | None = None
    _flush: tuple[threading.Event, list[bool]] | None = None

    def _has_work(self) -> bool:
        if self._stop or self._aborts or self._abort_all or self._pause_ack or self._flush:
            return True
        if self._update is not None and (self._paused or not self._running):
            return True
        if self._paused:
            return False
        return bool(self._running) or (bool(self._waiting) and self._update is None)

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._lock:
                    while not self._has_work():
                        self._lock.wait()
                    if self._stop and not self._running and not self._waiting:
                        self._finish_pending_controls()
                        return
                    self._apply_aborts()
                    if self._pause_ack is not None:
                        if self._paused == "retract":
                            self._retract_all()
                        self._pause_ack.set()
                        self._pause_ack = None
                    update, admit = None, []
                    if self._update is not None and (self._paused or not self._running):
                        update = self._update
                    elif not self._paused and self._update is None:
                        while self._waiting and len(self._running) + len(admit) < self.max_running:
                            admit.append(self._waiting.popleft())
                    decode = bool(self._running) and not self._paused and update is None
                    flush, self._flush = self._flush, None
                if flush is not None:
                    ok = not self._running and not self._waiting
                    if ok:
                        self.cache.reset()
                    flush[1][0] = ok
                    flush[0].set()
                if update is not None:
                    self._apply_update(update)
                    continue
                for req in admit:
                    self._prefill(req)
                if decode and self._running:
                    self._decode_step()

    def _finish_pending_controls(self) -> None:
        if self._update is not None:
            self._update.result = (False, "the server is shutting down", 0)
            self._update.done.set()
            self._update = None
        if self._pause_ack is not None:
            self._pause_ack.set()
            self._pause_ack = None
        if self._flush is not None:
            self._flush[0].set()
            self._flush = None

    def _apply_aborts(self) -> None:
        """Finish aborted requests (called with the lock held)."""
        if self._abort_all:
            targets = list(self._waiting) + list(self._running)
            self._abort_all = False
            self._aborts.clear()
        else:
            targets = [self._by_rid[rid] for rid in self._aborts if rid in self._by_rid]
            self._aborts.clear()
        for req in targets:
            if req in self._waiting:
                self._waiting.remove(req)
                self._finish(req, {"type": "abort", "message": "Abort in waiting queue"})
            elif req in self._running:
                self._finish(req, {"type": "abort", "message": "Abort request"})

    def _retract_all(self) -> None:
        """Drop every running request's cache and put it back at the head of the queue (lock held)."""
        for req in reversed(self._running):
            req.cached = 0
            req.retractions += 1
            self._waiting.appendleft(req)
        self._running.clear()

    def _finish(self, req: Request, finish: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Mark a request done, free its cache row (the last row moves into it) and wake its waiter."""
        if req in self._running:
            i = self._running.index(req)
            last = len(self._running) - 1
            if i != last:
                moved = self._running[last]
                self.cache.move_row(last, i, moved.cached)
                self._running[i] = moved
            self._running.pop()
        req.finish, req.error = finish, error
        req.finished_at = time.monotonic()
        self._by_rid.pop(req.rid, None)
        if finish is not None and finish.get("type") == "abort":
            self.stats["aborted"] += 1
        else:
            self.stats["finished"] += 1
        req.notify()

    def _apply_update(self, job: _Update) -> None:
        paused = len(self._running) + len(self._waiting) if self._paused else 0
        try:
            cfg = read_config(job.model_path)
            if cfg.shape_key() != self.config.shape_key():
                raise CheckpointError(
                    f"{job.model_path}: config.json describes a different model shape than the one served "
                    f"({cfg.shape_key()} vs {self.config.shape_key()})"
                )
            state = read_state(job.model_path)
            load_state_into(self.model, state, job.model_path)
            if job.weight_version is not None:
                self.weight_version = job.weight_version
            self.model_path = job.model_path
            if job.flush_cache and not self._running:
                self.cache.reset()
            self.stats["weight_updates"] += 1
            message = "Succeeded to update model weights."
            if job.weight_version is not None:
                message += f" Weight version updated to {job.weight_version}."
            job.result = (True, message, paused)
            log.info("weights updated from %s (version %s)", job.model_path, self.weight_version)
        except (CheckpointError, OSError) as e:
            job.result = (False, f"Failed to update weights: {e}. Rolling back to the previous weights is not needed: nothing was changed.", 0)
        with self._lock:
            self._update = None
            self._lock.notify_all()
        job.done.set()

    # ---- model steps --------------------------------------------------------------------------------

    def _prefill(self, req: Request) -> None:
        """Put one request's tokens into a fresh cache row and sample its first token."""
        try:
            ids = req.input_ids + req.output_ids  # a retracted request re-reads what it generated
            row = len(self._running)
            want_input = req.return_logprob and req.logprob_start_len >= 0 and req.input_logprobs is None
            scores: list[float] = []
            tops: list[list[tuple[float, int]]] = []
            hidden_last = None
            for start in range(0, len(ids), self.chunk_size):
                chunk = ids[start : start + self.chunk_size]
                tokens = torch.tensor([chunk], device=self.device)
                h = self.model.extend(tokens, torch.tensor([start], device=self.device), self.cache, first_row=row)
                hidden_last = h[0, -1]
                if want_input:
                    # Score positions predicting tokens start+1 .. of this chunk (the last one predicts the
                    # first generated token; SGLang drops it from the input side).
                    lo = max(req.logprob_start_len, start)
                    for s in range(lo, start + len(chunk), 256):
                        e = min(s + 256, start + len(chunk))
                        targets = ids[s + 1 : e + 1]
                        if not targets:
                            break
                        lp = torch.log_softmax(self.model.logits(h[0, s - start : s - start + len(targets)]), dim=-1)
                        scores += lp.gather(1, torch.tensor(targets, device=self.device)[:, None]).view(-1).tolist()
                        if req.top_logprobs_num > 0:
                            v, i = lp.topk(req.top_logprobs_num, dim=-1)
                            tops += [list(zip(a, b)) for a, b in zip(v.tolist(), i.tolist())]
            req.cached = len(ids)
            self.stats["prompt_tokens"] += len(ids)
            if want_input:
                n_in = len(req.input_ids) - req.logprob_start_len
                req.input_logprobs = ([None] + scores)[:n_in]
                if req.top_logprobs_num > 0:
                    req.input_top = ([None] + tops)[:n_in]
            with self._lock:
                self._running.append(req)
                self.stats["peak_running"] = max(self.stats["peak_running"], len(self._running))
                if req.params.max_new_tokens == 0:
                    self._finish(req, {"type": "length", "length": 0})
                    return
            logits = self.model.logits(hidden_last[None])
            self._sample_and_append([req], logits)
        except Exception as e:  # noqa: BLE001 - an engine failure must reach the client, not kill the thread
            log.error("prefill of %s failed:\n%s", req.rid, traceback.format_exc())
            with self._lock:
                self._finish(req, error=f"engine failure during prefill: {type(e).__name__}: {e}")

    def _decode_step(self) -> None:
        batch = list(self._running)
        try:
            tokens = torch.tensor([[r.output_ids[-1]] for r in batch], device=self.device)
            starts = torch.tensor([r.cached for r in batch], device=self.device)
            h = self.model.extend(tokens, starts, self.cache, first_row=0)
            for r in batch:
                r.cached += 1
            self._sample_and_append(batch, self.model.logits(h[:, 0]))
            self.stats["decode_steps"] += 1
            self._last_step_at = time.monotonic()
            self._maybe_log(len(batch))
        except Exception as e:  # noqa: BLE001
            log.error("decode step failed:\n%s", traceback.format_exc())
            with self._lock:
                for r in batch:
                    if r in self._running:
                        self._finish(r, error=f"engine failure during decode: {type(e).__name__}: {e}")

    def _sample_and_append(self, batch: list[Request], logits: torch.Tensor) -> None:
        for i, r in enumerate(batch):
            if len(r.output_ids) < r.params.min_new_tokens:
                stops = [t for t in (self.eos_token_ids | set(r.params.stop_token_ids)) if t < logits.shape[-1]]
                logits[i, stops] = float("-inf")
        tops_wanted = [r.top_logprobs_num if r.return_logprob else 0 for r in batch]
        tokens, logprobs, tops = sample(
            logits,
            [r.params for r in batch],
            [r.generator for r in batch],
            self.shared_generator,
            self.return_original_logprob,
            tops_wanted,
        )
        now = time.monotonic()
        finished: list[tuple[Request, dict]] = []
        for i, (r, tok, lp) in enumerate(zip(batch, tokens, logprobs)):
            r.output_ids.append(tok)
            r.output_logprobs.append(lp)
            if tops is not None:
                r.output_top.append(tops[i])
            if r.first_token_at is None:
                r.first_token_at = now
            reason = self._finish_reason(r, tok)
            if reason is not None:
                finished.append((r, reason))
            else:
                r.notify()
        self.stats["generation_tokens"] += len(batch)
        self._log_tokens += len(batch)
        if finished:
            with self._lock:
                for r, reason in finished:
                    self._finish(r, reason)

    def _finish_reason(self, r: Request, tok: int) -> dict[str, Any] | None:
        p = r.params
        if len(r.output_ids) >= p.max_new_tokens:
            return {"type": "length", "length": p.max_new_tokens}
        if not p.ignore_eos and (tok in self.eos_token_ids or tok in p.stop_token_ids):
            return {"type": "stop", "matched": tok}
        if p.stop and self.detokenizer is not None:
            # Matched on bytes, so a stop string split across tokens mid-character is still found.
            text = self.detokenizer.decode_bytes(r.output_ids, p.skip_special_tokens)
            for s in p.stop:
                if s.encode("utf-8") in text:
                    return {"type": "stop", "matched": s}
        return None

    def _maybe_log(self, running: int) -> None:
        steps = self.stats["decode_steps"]
        if not self.decode_log_interval or steps % self.decode_log_interval:
            return
        now = time.monotonic()
        tput = self._log_tokens / max(now - self._log_at, 1e-9)
        self._log_tokens, self._log_at = 0, now
        used = sum(r.cached for r in self._running)
        usage = used / (self.max_running * self.context_length)
        # SGLang's decode log line (parsed by @vime/metrics' parseSglangDecodeLog).
        log.info(
            "Decode batch [%d], #running-req: %d, #token: %d, token usage: %.2f, cuda graph: False, "
            "gen throughput (token/s): %.2f, #queue-req: %d, ",
            steps,
            running,
            used,
            usage,
            tput,
            len(self._waiting),
        )
