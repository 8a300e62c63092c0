"""The LLM-like workload: request parsing (pure) and the ASGI app under real uvicorn."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from drainsafe.workload.streaming import (
    BadRequest,
    Defaults,
    StreamingWorkload,
    parse_request,
)

D = Defaults(tokens=20, token_interval=0.05, max_duration=90)


def test_defaults_and_fields() -> None:
    gen = parse_request(b"", chat=False, defaults=D)
    assert (gen.stream, gen.tokens, gen.token_interval) == (False, 20, 0.05)
    gen = parse_request(b'{"stream": true, "duration": 2, "token_interval": 0.1}',
                        chat=True, defaults=D)
    assert gen.stream and gen.chat and gen.tokens == 20 and gen.duration == pytest.approx(2)


@pytest.mark.parametrize(("body", "message"), [
    (b"{", "body is not JSON"),
    (b"[1]", "JSON object"),
    (b'{"max_tokens": 0}', "max_tokens must be a positive integer"),
    (b'{"token_interval": "fast"}', "token_interval must be a number"),
    (b'{"duration": 91}', "exceeds the maximum 90s"),
])
def test_bad_requests_name_the_field(body: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_request(body, chat=False, defaults=D)


def test_env_configures_defaults() -> None:
    d = Defaults.from_env({"DRAINSAFE_WORKLOAD_TOKENS": "3",
                           "DRAINSAFE_WORKLOAD_TOKEN_INTERVAL": "0.2",
                           "DRAINSAFE_WORKLOAD_MAX_DURATION": "10"})
    assert d == Defaults(tokens=3, token_interval=0.2, max_duration=10)
    with pytest.raises(ValueError, match="DRAINSAFE_WORKLOAD"):
        Defaults.from_env({"DRAINSAFE_WORKLOAD_TOKENS": "many"})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(StreamingWorkload(Defaults(tokens=4, token_interval=0.01)),
                            host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)


def test_streams_openai_chunks_at_a_steady_rate_then_done(server: str) -> None:
    events: list[bytes] = []
    started = time.monotonic()
    with httpx.stream("POST", f"{server}/v1/chat/completions", timeout=10,
                      json={"stream": True, "max_tokens": 5, "token_interval": 0.05}) as r:
        for line in r.iter_lines():
            if line:
                events.append(line.encode())
    took = time.monotonic() - started
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[len(b"data: "):]) for e in events[:-1]]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == \
        [" tok0", " tok1", " tok2", " tok3", " tok4"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert 0.2 <= took < 3


def test_non_streaming_answer_and_trivial_endpoints(server: str) -> None:
    r = httpx.post(f"{server}/v1/completions", json={"max_tokens": 3, "token_interval": 0})
    assert r.json()["choices"][0]["text"] == " tok0 tok1 tok2"
    assert httpx.get(f"{server}/ping").text == "pong"
    assert httpx.get(f"{server}/health").status_code == 200
    assert httpx.get(f"{server}/v1/completions").status_code == 405
    bad = httpx.post(f"{server}/v1/completions", content=b"{")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]
