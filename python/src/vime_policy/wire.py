"""The policy server's SGLang wire: a `/generate` body read into engine requests (every field checked, the
unsupported ones refused), a finished request rendered as SGLang's answer, and the info routes' bodies.
The HTTP side is `server.py`."""

from __future__ import annotations

import logging
import time
from typing import Any

from .engine import Engine, EngineError, Request
from .model import parameter_count
from .sampling import ParamError, SamplingParams

VERSION = "vime-policy 0.1.0"
MAX_BODY = 256 * 1024 * 1024
HEALTH_CHECK_TIMEOUT = 20.0
log = logging.getLogger("vime_policy")

# Top-level /generate fields this server does not implement: refused when set, never silently ignored.
_UNSUPPORTED_FIELDS = (
    "input_embeds",
    "image_data",
    "video_data",
    "audio_data",
    "lora_path",
    "lora_id",
    "token_ids_logprob",
    "session_params",
    "custom_logit_processor",
)


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class PolicyServer:
    """The HTTP front of one Engine."""

    def __init__(self, engine: Engine, *, tokenizer_path: str | None, served_model_name: str, args: dict[str, Any]):
        self.engine = engine
        self.tokenizer_path = tokenizer_path
        self.served_model_name = served_model_name
        self.args = args
        self.stream_interval = max(1, int(args.get("stream_interval", 1)))
        self.shutting_down = False

    # ---- /generate ----------------------------------------------------------------------------------

    def parse_generate(self, body: Any) -> tuple[list[Request], bool, bool, bool]:
        """Requests of a /generate body; whether it was a batch, streams, and wants token text in log-probs."""
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        for key in _UNSUPPORTED_FIELDS:
            if body.get(key) not in (None, [], {}):
                raise HttpError(400, f"{key} is not supported by this server")
        if body.get("return_hidden_states"):
            raise HttpError(400, "return_hidden_states is not supported by this server")
        ids = body.get("input_ids")
        if ids is None:
            if body.get("text") is not None:
                raise HttpError(400, "this server takes input_ids only (it has no tokenizer for text input); tokenize on the client")
            raise HttpError(400, "input_ids is required: a list of token ids (or a list of such lists)")
        batch = isinstance(ids, list) and len(ids) > 0 and all(isinstance(x, list) for x in ids)
        rows = ids if batch else [ids]
        for i, row in enumerate(rows):
            where = f"input_ids[{i}]" if batch else "input_ids"
            if not isinstance(row, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
                raise HttpError(400, f"{where} must be a list of integer token ids")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, f"stream must be true or false, found {stream!r}")
        if batch and stream:
            raise HttpError(400, "streaming a batch of inputs is not supported here; stream each input separately")
        n = len(rows)
        sp = body.get("sampling_params")
        sps = sp if isinstance(sp, list) else [sp] * n
        rids = body.get("rid")
        rid_list = rids if isinstance(rids, list) else [rids] * n
        if len(sps) != n or len(rid_list) != n:
            raise HttpError(400, f"sampling_params and rid lists must have one entry per input ({n})")
        if batch and rids is not None and not isinstance(rids, list):
            raise HttpError(400, "rid must be a list with one id per input when input_ids is a batch")
        flags = {}
        for key, default in (("return_logprob", False), ("return_text_in_logprobs", False)):
            v = body.get(key, default)
            if v is None:
                v = default
            if not isinstance(v, bool):
                raise HttpError(400, f"{key} must be true or false, found {v!r}")
            flags[key] = v
        ints = {}
        for key, default in (("logprob_start_len", -1), ("top_logprobs_num", 0)):
            v = body.get(key, default)
            if v is None:
                v = default
            if isinstance(v, bool) or not isinstance(v, int) or v < (-1 if key == "logprob_start_len" else 0):
                raise HttpError(400, f"{key} must be an integer (logprob_start_len >= -1, top_logprobs_num >= 0), found {v!r}")
            ints[key] = v
        requests = []
        for row, sp_i, rid in zip(rows, sps, rid_list):
            if rid is not None and (not isinstance(rid, str) or not rid):
                raise HttpError(400, f"rid must be a non-empty string, found {rid!r}")
            try:
                params = SamplingParams.from_json(sp_i, self.engine.config.vocab_size)
            except ParamError as e:
                raise HttpError(400, str(e)) from None
            requests.append(
                Request(
                    rid=rid or self.engine.new_rid(),
                    input_ids=list(row),
                    params=params,
                    return_logprob=flags["return_logprob"],
                    logprob_start_len=ints["logprob_start_len"],
                    top_logprobs_num=ints["top_logprobs_num"],
                )
            )
        return requests, batch, stream, flags["return_text_in_logprobs"]

    def render(self, req: Request, text_in_logprobs: bool) -> dict[str, Any]:
        """SGLang's answer for one request as it stands (cumulative while streaming)."""
        det = self.engine.detokenizer
        n = len(req.output_logprobs)  # appended after output_ids, so both hold n entries
        if req.top_logprobs_num > 0 and req.return_logprob:
            n = min(n, len(req.output_top))
        out_ids = req.output_ids[:n]
        finish = req.finish if req.done and n == len(req.output_ids) else None
        text = ""
        if det is not None:
            shown = out_ids
            matched = (finish or {}).get("matched")
            if finish and not req.params.no_stop_trim and isinstance(matched, int) and matched and shown:
                shown = shown[:-1]  # SGLang trims the matched stop token from the text (not from the ids)
            text = det.decode(shown, req.params.skip_special_tokens)
            if finish and not req.params.no_stop_trim and isinstance(matched, str) and matched:
                pos = text.find(matched)
                text = text[:pos] if pos != -1 else text
            elif finish is None and text.endswith("\ufffd"):
                text = text.rstrip("\ufffd")  # hold back a character whose bytes are still arriving
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": len(req.input_ids),
            "weight_version": self.engine.weight_version,
            "total_retractions": req.retractions,
            "completion_tokens": n,
            "cached_tokens": 0,
        }
        if req.return_logprob:
            tok = det.token_text if (det is not None and text_in_logprobs) else (lambda _i: None)
            start = req.logprob_start_len if req.logprob_start_len >= 0 else len(req.input_ids) - 1
            in_lps = req.input_logprobs if req.input_logprobs is not None else [None]
            meta["input_token_logprobs"] = [[lp, i, tok(i)] for lp, i in zip(in_lps, req.input_ids[start:])]
            meta["output_token_logprobs"] = [[req.output_logprobs[k], out_ids[k], tok(out_ids[k])] for k in range(n)]
            if req.top_logprobs_num > 0:
                meta["input_top_logprobs"] = [
                    None if row is None else [[lp, i, tok(i)] for lp, i in row] for row in (req.input_top or [None])
                ]
                meta["output_top_logprobs"] = [[[lp, i, tok(i)] for lp, i in row] for row in req.output_top[:n]]
        if finish is not None:
            meta["e2e_latency"] = (req.finished_at or time.monotonic()) - req.created
        return {"text": text, "output_ids": out_ids, "meta_info": meta}

    # ---- control ------------------------------------------------------------------------------------

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.engine.model_path,
            "tokenizer_path": self.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.engine.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
        }

    def server_info(self) -> dict[str, Any]:
        e = self.engine
        return {
            "model_path": e.model_path,
            "tokenizer_path": self.tokenizer_path,
            "served_model_name": self.served_model_name,
            "tp_size": 1,
            "dp_size": 1,
            "pp_size": 1,
            "max_running_requests": e.max_running,
            "context_length": e.context_length,
            "chunked_prefill_size": e.chunk_size,
            "random_seed": e.seed,
            "device": str(e.device),
            "dtype": str(e.dtype).replace("torch.", ""),
            "disaggregation_mode": "null",
            "stream_interval": self.stream_interval,
            "return_original_logprob": e.return_original_logprob,
            "weight_version": e.weight_version,
            "num_parameters": parameter_count(e.model),
            "internal_states": [e.snapshot()],
            "version": VERSION,
        }

    def metrics(self) -> str:
        s = self.engine.snapshot()
        labels = f'model_name="{self.served_model_name}",engine_type="unified",tp_rank="0",pp_rank="0"'
        lines = []
        for name, kind, value in (
            ("sglang:num_running_reqs", "gauge", s["num_running_reqs"]),
            ("sglang:num_queue_reqs", "gauge", s["num_waiting_reqs"]),
            ("sglang:num_used_tokens", "gauge", s["num_used_tokens"]),
            ("sglang:token_usage", "gauge", s["token_usage"]),
            ("sglang:cache_hit_rate", "gauge", 0),
            ("sglang:prompt_tokens_total", "counter", s["prompt_tokens"]),
            ("sglang:generation_tokens_total", "counter", s["generation_tokens"]),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"]
        return "\n".join(lines) + "\n"

    def health_generate(self) -> bool:
        """SGLang's check: healthy if the engine made progress recently, else run a 1-token generation."""
        snap = self.engine.snapshot()
        if not snap["alive"] or self.shutting_down:
            return False
        if snap["num_running_reqs"] and snap["last_step_age_s"] < HEALTH_CHECK_TIMEOUT:
            return True
        req = Request(rid=f"HEALTH_CHECK_{self.engine.new_rid()}", input_ids=[0], params=SamplingParams(max_new_tokens=1, top_k=1))
        try:
            self.engine.submit(req)
        except EngineError:
            return False
        with req.cond:
            req.cond.wait_for(lambda: req.done, timeout=HEALTH_CHECK_TIMEOUT)
        if not req.done:
            self.engine.abort(req.rid)
            return False
        return req.error is None
