"""The policy server: a Qwen3 checkpoint served on SGLang's native HTTP wire (stdlib http.server + torch).

    python -m vime_policy.server --model-path DIR [--tokenizer-path DIR] [--host 127.0.0.1] [--port 30000]

Routes (SGLang 0.5.x names and shapes; see README.md for the field list and where each comes from):
`POST /generate`, `GET /health`, `GET /health_generate`, `GET /model_info` (`/get_model_info`),
`GET /weight_version` (`/get_weight_version`), `GET /server_info` (`/get_server_info`), `GET /metrics`,
`GET /v1/models`, `POST /abort_request`, `GET|POST /flush_cache`, `POST /update_weights_from_disk`,
`POST /pause_generation`, `POST /continue_generation`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch

from .engine import Engine, EngineError, Request
from .model import CheckpointError, load_pretrained, parameter_count, parse_dtype, stop_token_ids
from .sampling import ParamError, SamplingParams
from .tokenizer import Detokenizer, TokenizerError
from .wire import MAX_BODY, HttpError, PolicyServer

log = logging.getLogger("vime_policy")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vime-policy"
    app: PolicyServer  # set on the subclass made by serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s %s", self.address_string(), format % args)

    # ---- plumbing -----------------------------------------------------------------------------------

    def _body(self) -> Any:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raise HttpError(411, "chunked request bodies are not supported; send Content-Length")
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise HttpError(413, f"request body of {length} bytes exceeds the {MAX_BODY}-byte limit")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HttpError(400, f"the request body is not JSON ({e})") from None

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message}})

    def _client_gone(self) -> bool:
        """True once the client closed its connection (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        try:
            route = ROUTES.get((method, path)) or ROUTES.get(("ANY", path))
            if route is None:
                known = any(p == path for _, p in ROUTES)
                raise HttpError(405 if known else 404, f"no route {method} {path}")
            route(self)
        except HttpError as e:
            self._error(e.status, str(e))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - answer 500 rather than drop the connection
            log.exception("handler for %s %s failed", method, path)
            try:
                self._error(500, f"{type(e).__name__}: {e}")
            except OSError:
                self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802 - SGLang accepts PUT for /generate
        self._dispatch("POST" if self.path.split("?", 1)[0] == "/generate" else "PUT")

    # ---- routes -------------------------------------------------------------------------------------

    def generate(self) -> None:
        app = self.app
        if app.shutting_down:
            raise HttpError(503, "the server is shutting down")
        requests, batch, stream, text_in_logprobs = app.parse_generate(self._body())
        submitted = []
        try:
            for req in requests:
                app.engine.submit(req)
                submitted.append(req)
        except EngineError as e:
            for req in submitted:
                app.engine.abort(req.rid)
            raise HttpError(400, str(e)) from None
        if stream:
            return self._stream(requests[0], text_in_logprobs)
        for req in requests:
            while not req.done:
                with req.cond:
                    req.cond.wait_for(lambda: req.done, timeout=1.0)
                if not req.done and self._client_gone():
                    # SGLang aborts a request whose client disconnected.
                    for r in requests:
                        app.engine.abort(r.rid)
                    self.close_connection = True
                    return
        failed = next((r.error for r in requests if r.error), None)
        if failed:
            raise HttpError(500, failed)
        outs = [app.render(r, text_in_logprobs) for r in requests]
        self._send(200, outs if batch else outs[0])

    def _stream(self, req: Request, text_in_logprobs: bool) -> None:
        app = self.app
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        sent = 0
        try:
            while True:
                with req.cond:
                    req.cond.wait_for(lambda: req.done or len(req.output_logprobs) >= sent + app.stream_interval, timeout=1.0)
                if req.error:
                    chunk(b"data: " + json.dumps({"error": {"message": req.error}}).encode() + b"\n\n")
                    break
                n = len(req.output_logprobs)
                if n > sent or req.done:
                    out = app.render(req, text_in_logprobs)
                    sent = len(out["output_ids"])
                    chunk(b"data: " + json.dumps(out, allow_nan=False).encode() + b"\n\n")
                    if out["meta_info"]["finish_reason"] is not None:
                        break
                elif self._client_gone():
                    raise BrokenPipeError
            chunk(b"data: [DONE]\n\n")
            chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            app.engine.abort(req.rid)
            self.close_connection = True

    def health(self) -> None:
        app = self.app
        ok = app.engine.snapshot()["alive"] and not app.shutting_down
        self._send(200 if ok else 503, "" if ok else "engine is not running\n", "text/plain")

    def health_generate(self) -> None:
        ok = self.app.health_generate()
        self._send(200 if ok else 503, "" if ok else "health generation failed\n", "text/plain")

    def model_info(self) -> None:
        self._send(200, self.app.model_info())

    def weight_version(self) -> None:
        # slime's SGLang patch (0.5.x) answers this; newer upstream points at /model_info, which has it too.
        self._send(200, {"weight_version": self.app.engine.weight_version})

    def server_info(self) -> None:
        self._send(200, self.app.server_info())

    def metrics(self) -> None:
        self._send(200, self.app.metrics(), "text/plain; version=0.0.4")

    def models(self) -> None:
        name = self.app.served_model_name
        self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "root": self.app.engine.model_path, "owned_by": "vime-policy"}]})

    def abort_request(self) -> None:
        body = self._body()
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        rid, abort_all = body.get("rid", ""), body.get("abort_all", False)
        if not isinstance(abort_all, bool) or (rid is not None and not isinstance(rid, str)):
            raise HttpError(400, "abort_request takes {rid: string} or {abort_all: true}")
        self.app.engine.abort(rid or None, abort_all)
        self._send(200, "", "text/plain")

    def flush_cache(self) -> None:
        if self.app.engine.flush_cache():
            self._send(
                200,
                "Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n",
                "text/plain",
            )
        else:
            self._send(400, "Cache not flushed: there are running or waiting requests.\n", "text/plain")

    def update_weights_from_disk(self) -> None:
        body = self._body()
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise HttpError(400, "model_path is required: the checkpoint directory to load")
        fmt = body.get("load_format")
        if fmt not in (None, "auto", "safetensors"):
            raise HttpError(400, f"load_format {fmt!r} is not supported; this server reads safetensors checkpoints")
        version = body.get("weight_version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int, float))):
            raise HttpError(400, f"weight_version must be a string, found {version!r}")
        flags = {}
        for key, default in (("abort_all_requests", False), ("flush_cache", True)):
            v = body.get(key, default)
            if not isinstance(v, bool):
                raise HttpError(400, f"{key} must be true or false, found {v!r}")
            flags[key] = v
        ok, message, paused = self.app.engine.update_weights(
            path, None if version is None else str(version), flags["abort_all_requests"], flags["flush_cache"]
        )
        if ok and body.get("torch_empty_cache") and torch.cuda.is_available():
            torch.cuda.empty_cache()
        self._send(200 if ok else 400, {"success": ok, "message": message, "num_paused_requests": paused})

    def pause_generation(self) -> None:
        body = self._body()
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        try:
            self.app.engine.pause(mode)
        except ParamError as e:
            raise HttpError(400, str(e)) from None
        self._send(200, {"message": "Generation paused successfully.", "status": "ok"})

    def continue_generation(self) -> None:
        self._body()
        self.app.engine.resume()
        self._send(200, {"message": "Generation continued successfully.", "status": "ok"})


ROUTES = {
    ("POST", "/generate"): Handler.generate,
    ("ANY", "/health"): Handler.health,
    ("ANY", "/health_generate"): Handler.health_generate,
    ("GET", "/model_info"): Handler.model_info,
    ("GET", "/get_model_info"): Handler.model_info,
    ("GET", "/weight_version"): Handler.weight_version,
    ("GET", "/get_weight_version"): Handler.weight_version,
    ("GET", "/server_info"): Handler.server_info,
    ("GET", "/get_server_info"): Handler.server_info,
    ("GET", "/metrics"): Handler.metrics,
    ("GET", "/v1/models"): Handler.models,
    ("POST", "/abort_request"): Handler.abort_request,
    ("ANY", "/flush_cache"): Handler.flush_cache,
    ("POST", "/update_weights_from_disk"): Handler.update_weights_from_disk,
    ("POST", "/pause_generation"): Handler.pause_generation,
    ("POST", "/continue_generation"): Handler.continue_generation,
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise CheckpointError(f"--device {name}: CUDA is not available on this machine")
    return torch.device(name)


def build(args: argparse.Namespace) -> tuple[PolicyServer, Engine]:
    """Load the model and start the engine (no socket yet)."""
    device = pick_device(args.device)
    if args.dtype == "auto":
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    else:
        dtype = parse_dtype(args.dtype)
    started = time.monotonic()
    model = load_pretrained(args.model_path, device=device, dtype=dtype)
    for p in model.parameters():
        p.requires_grad_(False)
    tokenizer_path = args.tokenizer_path
    if tokenizer_path is None and (Path(args.model_path) / "tokenizer.json").is_file():
        tokenizer_path = args.model_path
    detok = Detokenizer(tokenizer_path) if tokenizer_path else None
    if detok is None:
        log.warning("no tokenizer.json: answers carry empty `text` and `stop` strings are refused (stop by token ids)")
    max_running = args.max_running_requests or (64 if device.type == "cuda" else 16)
    engine = Engine(
        model,
        str(args.model_path),
        eos_token_ids=stop_token_ids(args.model_path, model.config),
        detokenizer=detok,
        device=device,
        max_running=max_running,
        context_length=args.context_length,
        chunk_size=args.chunked_prefill_size,
        seed=args.random_seed,
        weight_version=args.weight_version,
        return_original_logprob=args.return_original_logprob,
        decode_log_interval=args.decode_log_interval,
    )
    app = PolicyServer(
        engine,
        tokenizer_path=str(tokenizer_path) if tokenizer_path else None,
        served_model_name=args.served_model_name or str(args.model_path),
        args=vars(args),
    )
    log.info(
        "loaded %s: %.2fM parameters, %s on %s, in %.1f s",
        args.model_path,
        parameter_count(model) / 1e6,
        str(dtype).replace("torch.", ""),
        device,
        time.monotonic() - started,
    )
    return app, engine


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vime_policy.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="Hugging Face checkpoint directory (config.json + safetensors)")
    p.add_argument("--tokenizer-path", help="directory with tokenizer.json (default: the model directory, if it has one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed at start)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16")
    p.add_argument("--max-running-requests", type=int, default=None, help="batch size (default 64 on CUDA, 16 on CPU)")
    p.add_argument("--context-length", type=int, default=None, help="default: max_position_embeddings")
    p.add_argument("--chunked-prefill-size", type=int, default=2048)
    p.add_argument("--random-seed", type=int, default=0)
    p.add_argument("--weight-version", default="default")
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--served-model-name", default=None)
    p.add_argument(
        "--return-original-logprob",
        action="store_true",
        default=os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true", "yes"),
        help="log-probs of the raw logits instead of logits / temperature (SGLANG_RETURN_ORIGINAL_LOGPROB)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="[%(asctime)s TP0] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        app, engine = build(args)
    except (CheckpointError, TokenizerError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    handler = type("BoundHandler", (Handler,), {"app": app})
    try:
        httpd = _Server((args.host, args.port), handler)
    except OSError as e:
        print(f"error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        engine.close()
        return 2
    host, port = httpd.server_address[:2]
    warm = Request(rid="warmup", input_ids=[0], params=SamplingParams(max_new_tokens=1, top_k=1))
    engine.submit(warm)
    with warm.cond:
        warm.cond.wait_for(lambda: warm.done, timeout=300)

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        app.shutting_down = True
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"vime-policy listening on http://{host}:{port}", flush=True)
    log.info("The server is fired up and ready to roll!")
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        engine.close()
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
