"""The HTTP server as a client sees it: SGLang's answer layout, SSE framing, errors for hostile bodies,
client disconnects, and the control routes."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from vime_policy.server import Handler, _Server, build, parse_args
from vime_testing import wait_until

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198]


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tok_dir: Path):
    args = parse_args(["--model-path", str(tiny_dir), "--tokenizer-path", str(tok_dir), "--device", "cpu", "--context-length", "4096", "--decode-log-interval", "0"])
    app, engine = build(args)
    httpd = _Server(("127.0.0.1", 0), type("H", (Handler,), {"app": app}))
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield app, httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    engine.close()


def call(port: int, method: str, path: str, body=None, raw: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers={"content-type": "application/json", **(headers or {})})
    res = conn.getresponse()
    text = res.read().decode()
    conn.close()
    try:
        return res.status, json.loads(text), res
    except json.JSONDecodeError:
        return res.status, text, res


def test_generate_answers_in_sglangs_layout(server, detok) -> None:
    app, port = server
    status, out, _ = call(port, "POST", "/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "sampling_seed": 1}, "return_logprob": True, "rid": "r-1"})
    assert status == 200
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert meta["id"] == "r-1" and meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 6 and meta["cached_tokens"] == 0
    assert meta["weight_version"] == "default" and meta["total_retractions"] == 0 and meta["e2e_latency"] > 0
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(isinstance(e[0], float) and e[0] <= 0 and e[2] is None for e in meta["output_token_logprobs"])
    assert meta["input_token_logprobs"] == [[None, PROMPT[-1], None]]  # logprob_start_len -1: the last prompt token
    assert out["text"] == detok.decode(out["output_ids"], skip_special_tokens=True)
    status, plain, _ = call(port, "POST", "/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and "output_token_logprobs" not in plain["meta_info"]
    status, texty, _ = call(
        port,
        "POST",
        "/generate",
        {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3}, "return_logprob": True, "return_text_in_logprobs": True, "top_logprobs_num": 2, "logprob_start_len": 9},
    )
    meta = texty["meta_info"]
    assert [e[2] for e in meta["output_token_logprobs"]] == [detok.token_text(i) for i in texty["output_ids"]]
    assert len(meta["input_token_logprobs"]) == len(PROMPT) - 9 and meta["input_token_logprobs"][0][0] is None
    assert all(len(row) == 2 for row in meta["output_top_logprobs"])
    assert meta["input_top_logprobs"][0] is None and len(meta["input_top_logprobs"][1]) == 2


def test_batch_input_gives_a_list(server) -> None:
    _, port = server
    status, outs, _ = call(port, "POST", "/generate", {"input_ids": [PROMPT, PROMPT[:4]], "sampling_params": {"max_new_tokens": 2}, "rid": ["b1", "b2"]})
    assert status == 200 and [o["meta_info"]["id"] for o in outs] == ["b1", "b2"]


def test_streaming_is_sse_with_cumulative_chunks(server) -> None:
    _, port = server
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5, "sampling_seed": 3}, "return_logprob": True, "stream": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/generate", body=json.dumps(body))
    res = conn.getresponse()
    assert res.status == 200 and res.getheader("content-type") == "text/event-stream"
    assert res.getheader("transfer-encoding") == "chunked"
    events = [e for e in res.read().decode().split("\n\n") if e]
    conn.close()
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    # Each event is the answer as it stands when sent (SGLang's cumulative chunks): a busy machine may
    # generate several tokens between two events, so the lengths rise but need not rise by one.
    lengths = [len(c["output_ids"]) for c in chunks]
    assert lengths == sorted(set(lengths)) and lengths[0] >= 1 and lengths[-1] == 5
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    for a, b in zip(chunks, chunks[1:]):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
        assert b["meta_info"]["output_token_logprobs"][: len(a["output_ids"])] == a["meta_info"]["output_token_logprobs"]
    _, whole, _ = call(port, "POST", "/generate", {**body, "stream": False})
    assert whole["output_ids"] == chunks[-1]["output_ids"]
    assert whole["meta_info"]["output_token_logprobs"] == chunks[-1]["meta_info"]["output_token_logprobs"]


HOSTILE = [
    (b"not json", "not JSON"),
    (b"[1,2]", "must be a JSON object"),
    (json.dumps({}).encode(), "input_ids is required"),
    (json.dumps({"text": "hello"}).encode(), "input_ids only"),
    (json.dumps({"input_ids": "1,2,3"}).encode(), "input_ids must be a list of integer token ids"),
    (json.dumps({"input_ids": [1, "2"]}).encode(), "input_ids must be a list of integer token ids"),
    (json.dumps({"input_ids": [1, 2.5]}).encode(), "input_ids must be a list of integer token ids"),
    (json.dumps({"input_ids": [1, True]}).encode(), "input_ids must be a list of integer token ids"),
    (json.dumps({"input_ids": [[1], "x"]}).encode(), "input_ids must be a list"),
    (json.dumps({"input_ids": [999999999]}).encode(), "outside the vocabulary"),
    (json.dumps({"input_ids": []}).encode(), "input_ids is empty"),
    (json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": -3}}).encode(), "max_new_tokens must be at least 0"),
    (json.dumps({"input_ids": [1], "sampling_params": {"top_p": 7}}).encode(), "top_p must be in"),
    (json.dumps({"input_ids": [1], "sampling_params": {"bogus": 1}}).encode(), "unknown field(s) ['bogus']"),
    (json.dumps({"input_ids": [1], "sampling_params": "hot"}).encode(), "sampling_params must be an object"),
    (json.dumps({"input_ids": [1], "stream": "yes"}).encode(), "stream must be true or false"),
    (json.dumps({"input_ids": [[1], [2]], "stream": True}).encode(), "streaming a batch"),
    (json.dumps({"input_ids": [1], "rid": 5}).encode(), "rid must be a non-empty string"),
    (json.dumps({"input_ids": [1], "return_logprob": "true"}).encode(), "return_logprob must be true or false"),
    (json.dumps({"input_ids": [1], "logprob_start_len": -2}).encode(), "logprob_start_len must be"),
    (json.dumps({"input_ids": [1, 2], "logprob_start_len": 5, "return_logprob": True}).encode(), "must be below the input length"),
    (json.dumps({"input_ids": [1], "image_data": "x.png"}).encode(), "image_data is not supported"),
    (json.dumps({"input_ids": [1], "lora_path": "l"}).encode(), "lora_path is not supported"),
    (json.dumps({"input_ids": [1] * 5000}).encode(), "longer than the model's context length"),
    (json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": 10**9}}).encode(), "exceeds the model's maximum context length"),
    (b'{"input_ids": [1], "sampling_params": {"temperature": NaN}}', "temperature must be a number"),
]


@pytest.mark.parametrize("raw,message", HOSTILE)
def test_hostile_generate_bodies_get_400_with_the_field(server, raw: bytes, message: str) -> None:
    _, port = server
    status, out, _ = call(port, "POST", "/generate", raw=raw)
    assert status == 400, out
    assert message in out["error"]["message"]


def test_the_server_survives_hostile_bodies(server) -> None:
    _, port = server
    status, out, _ = call(port, "POST", "/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and len(out["output_ids"]) == 2
    assert call(port, "GET", "/nowhere")[0] == 404
    assert call(port, "GET", "/generate")[0] == 405
    assert call(port, "POST", "/generate", raw=b"{}", headers={"content-length": str(10**12)})[0] == 413


def test_a_disconnected_client_aborts_its_request(server) -> None:
    app, port = server
    before = app.engine.stats["aborted"]
    for stream in (False, True):
        body = json.dumps({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}, "stream": stream, "rid": f"gone-{stream}"}).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: app.engine.snapshot()["num_running_reqs"] == 1, timeout=30)
        s.close()
        wait_until(lambda: app.engine.snapshot()["num_running_reqs"] == 0, timeout=30)
    assert app.engine.stats["aborted"] == before + 2


def test_abort_request_route_returns_the_partial_answer(server) -> None:
    app, port = server
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(out=call(port, "POST", "/generate", {"input_ids": PROMPT, "rid": "to-abort", "return_logprob": True, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}})))
    t.start()
    wait_until(lambda: app.engine.snapshot()["num_running_reqs"] == 1, timeout=30)
    time.sleep(0.1)
    assert call(port, "POST", "/abort_request", {"rid": "to-abort"})[0] == 200
    t.join(30)
    status, out, _ = result["out"]
    assert status == 200 and out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(out["output_ids"]) < 3000 and len(out["meta_info"]["output_token_logprobs"]) == len(out["output_ids"])
    assert call(port, "POST", "/abort_request", {"abort_all": "yes"})[0] == 400


def test_info_health_metrics(server, tiny_dir: Path) -> None:
    app, port = server
    status, info, _ = call(port, "GET", "/model_info")
    assert status == 200 and info["model_path"] == str(tiny_dir) and info["weight_version"] == "default"
    assert info["architectures"] == ["Qwen3ForCausalLM"] and info["is_generation"] is True
    assert call(port, "GET", "/get_model_info")[1] == info
    assert call(port, "GET", "/weight_version")[1] == {"weight_version": "default"}
    status, sinfo, _ = call(port, "GET", "/server_info")
    assert sinfo["tp_size"] == 1 and sinfo["max_running_requests"] == 16 and sinfo["internal_states"][0]["alive"]
    assert call(port, "GET", "/health")[0] == 200
    assert call(port, "GET", "/health_generate")[0] == 200
    status, text, _ = call(port, "GET", "/metrics")
    assert status == 200 and "sglang:num_running_reqs{" in text and "sglang:generation_tokens_total{" in text


def test_update_pause_continue_flush_routes(server, tiny_dir: Path, tiny_dir_other: Path) -> None:
    _, port = server
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "sampling_seed": 9}, "return_logprob": True}
    before = call(port, "POST", "/generate", body)[1]
    status, out, _ = call(port, "POST", "/update_weights_from_disk", {"model_path": str(tiny_dir_other), "weight_version": "step-1"})
    assert status == 200 and out == {"success": True, "message": "Succeeded to update model weights. Weight version updated to step-1.", "num_paused_requests": 0}
    after = call(port, "POST", "/generate", body)[1]
    assert after["meta_info"]["weight_version"] == "step-1"
    assert after["meta_info"]["output_token_logprobs"] != before["meta_info"]["output_token_logprobs"]
    status, out, _ = call(port, "POST", "/update_weights_from_disk", {"model_path": "/nonexistent", "weight_version": "x"})
    assert status == 400 and out["success"] is False and "no config.json" in out["message"]
    for bad, message in [({}, "model_path is required"), ({"model_path": "x", "load_format": "gguf"}, "load_format"), ({"model_path": "x", "flush_cache": "no"}, "flush_cache must be")]:
        status, out, _ = call(port, "POST", "/update_weights_from_disk", bad)
        assert status == 400 and message in out["error"]["message"]
    assert call(port, "GET", "/weight_version")[1] == {"weight_version": "step-1"}
    assert call(port, "POST", "/pause_generation", {"mode": "sideways"})[0] == 400
    assert call(port, "POST", "/pause_generation", {"mode": "in_place"})[1] == {"message": "Generation paused successfully.", "status": "ok"}
    status, out, _ = call(port, "POST", "/update_weights_from_disk", {"model_path": str(tiny_dir), "weight_version": 2})
    assert status == 200 and out["success"]
    assert call(port, "POST", "/continue_generation", {})[1] == {"message": "Generation continued successfully.", "status": "ok"}
    back = call(port, "POST", "/generate", body)[1]
    assert back["meta_info"]["weight_version"] == "2" and back["output_ids"] == before["output_ids"]
    assert call(port, "POST", "/flush_cache")[0] == 200
    assert call(port, "GET", "/flush_cache")[0] == 200
