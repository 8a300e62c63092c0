"""An LLM-like streaming server: OpenAI-style SSE, tokens at a steady rate, [DONE] at the end.

The workload of the lab, the demo and the benchmarks. A plain ASGI app, so it runs under
plain uvicorn, `drainsafe serve`, or behind `drainsafe run`:

    python -m drainsafe.workload.streaming --host 127.0.0.1 --port 8000
    uvicorn drainsafe.workload.streaming:app
    drainsafe serve drainsafe.workload.streaming:app
    drainsafe run -- uvicorn drainsafe.workload.streaming:app --port 8001

Endpoints:
- POST /v1/completions, POST /v1/chat/completions: body fields `stream` (bool),
  `max_tokens` (int), and two extensions, `token_interval` (seconds between tokens) and
  `duration` (seconds; sets max_tokens = duration / token_interval). With `stream: true` the
  answer is SSE (`data: {chunk}` per token, then `data: [DONE]`); otherwise one JSON answer
  after the whole generation time.
- GET /ping: a trivial 4-byte answer, for request-rate benchmarks.
- GET /health: 200 while the process serves (the server's own readiness, like vLLM's).

Defaults come from the environment (the lab passes env):
DRAINSAFE_WORKLOAD_TOKENS (default 20), DRAINSAFE_WORKLOAD_TOKEN_INTERVAL (default 0.05 s),
DRAINSAFE_WORKLOAD_MAX_DURATION (default 90 s; longer requests get 400).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.server.types import Receive, Scope, Send
from drainsafe.shell import EXIT_OK

MODEL = "drainsafe-workload"
DONE = b"data: [DONE]\n\n"


class BadRequest(ValueError):
    """A request the workload cannot serve; the message names the field."""


@dataclass(frozen=True)
class Defaults:
    tokens: int = 20
    token_interval: float = 0.05
    max_duration: float = 90.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Defaults:
        env = os.environ if env is None else env
        base = cls()
        try:
            return cls(
                tokens=int(env.get("DRAINSAFE_WORKLOAD_TOKENS", base.tokens)),
                token_interval=float(
                    env.get("DRAINSAFE_WORKLOAD_TOKEN_INTERVAL", base.token_interval)),
                max_duration=float(
                    env.get("DRAINSAFE_WORKLOAD_MAX_DURATION", base.max_duration)),
            )
        except ValueError as exc:
            raise ValueError(f"DRAINSAFE_WORKLOAD_* environment: {exc}") from exc


@dataclass(frozen=True)
class Generation:
    """What one request asks for, validated."""

    stream: bool
    tokens: int
    token_interval: float
    chat: bool

    @property
    def duration(self) -> float:
        return self.tokens * self.token_interval


def parse_request(body: bytes, *, chat: bool, defaults: Defaults) -> Generation:
    """The generation a request body asks for, or BadRequest naming the offending field."""
    try:
        data = json.loads(body) if body.strip() else {}
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    interval = _number(data, "token_interval", defaults.token_interval)
    if interval < 0:
        raise BadRequest("token_interval must be >= 0")
    if "duration" in data:
        duration = _number(data, "duration", 0.0)
        if duration < 0:
            raise BadRequest("duration must be >= 0")
        tokens = max(1, round(duration / interval)) if interval > 0 else 1
    else:
        raw = data.get("max_tokens", defaults.tokens)
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
            raise BadRequest("max_tokens must be a positive integer")
        tokens = raw
    gen = Generation(stream=bool(data.get("stream", False)), tokens=tokens,
                     token_interval=interval, chat=chat)
    if gen.duration > defaults.max_duration:
        raise BadRequest(f"generation of {gen.duration:g}s exceeds the maximum "
                         f"{defaults.max_duration:g}s (DRAINSAFE_WORKLOAD_MAX_DURATION)")
    return gen


def _number(data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise BadRequest(f"{key} must be a number of seconds")
    return float(value)


def token_text(i: int) -> str:
    return f" tok{i}"


def chunk(gen: Generation, ident: str, created: int, i: int, last: bool) -> bytes:
    """One SSE event carrying token i, in the OpenAI completion or chat chunk shape."""
    finish = "length" if last else None
    choice: dict[str, Any]
    if gen.chat:
        choice = {"index": 0, "delta": {"content": token_text(i)}, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": token_text(i), "finish_reason": finish}
        obj = "text_completion"
    payload = {"id": ident, "object": obj, "created": created, "model": MODEL,
               "choices": [choice]}
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def whole_answer(gen: Generation, ident: str, created: int) -> bytes:
    text = "".join(token_text(i) for i in range(gen.tokens))
    choice: dict[str, Any]
    if gen.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "length"}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
        obj = "text_completion"
    return json.dumps({"id": ident, "object": obj, "created": created, "model": MODEL,
                       "choices": [choice],
                       "usage": {"completion_tokens": gen.tokens}}).encode()


class StreamingWorkload:
    """The ASGI app."""

    def __init__(self, defaults: Defaults | None = None) -> None:
        self._defaults = defaults
        self._counter = 0

    @property
    def defaults(self) -> Defaults:
        # Read lazily so that env set after import (e.g. by a test or the lab) applies.
        if self._defaults is None:
            self._defaults = Defaults.from_env()
        return self._defaults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/ping" and method in ("GET", "HEAD"):
            await _plain(send, 200, b"pong", b"text/plain")
        elif path == "/health" and method in ("GET", "HEAD"):
            await _plain(send, 200, b"ok", b"text/plain")
        elif path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                await _plain(send, 405, b'{"error":"use POST"}', b"application/json")
                return
            await self._complete(receive, send, chat=path == "/v1/chat/completions")
        else:
            await _plain(send, 404, b'{"error":"not found"}', b"application/json")

    async def _complete(self, receive: Receive, send: Send, *, chat: bool) -> None:
        body = await _read_body(receive)
        try:
            gen = parse_request(body, chat=chat, defaults=self.defaults)
        except BadRequest as exc:
            await _plain(send, 400, json.dumps({"error": str(exc)}).encode(),
                         b"application/json")
            return
        self._counter += 1
        ident, created = f"cmpl-{os.getpid()}-{self._counter}", int(time.time())
        loop = asyncio.get_running_loop()
        start = loop.time()
        if not gen.stream:
            watcher = loop.create_task(_watch_disconnect(receive, asyncio.Event()))
            try:
                # Stop generating if the client goes away before the answer is ready.
                async with asyncio.timeout(gen.duration):
                    await asyncio.shield(watcher)
                return
            except TimeoutError:
                pass
            finally:
                watcher.cancel()
            await _plain(send, 200, whole_answer(gen, ident, created), b"application/json")
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache")]})
        # Like an inference server, stop generating when the client has gone.
        gone = asyncio.Event()
        watcher = loop.create_task(_watch_disconnect(receive, gone))
        try:
            for i in range(gen.tokens):
                # Steady rate: schedule against the start so delays do not accumulate.
                wait = start + (i + 1) * gen.token_interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if gone.is_set():
                    return
                await send({"type": "http.response.body",
                            "body": chunk(gen, ident, created, i, i == gen.tokens - 1),
                            "more_body": True})
            await send({"type": "http.response.body", "body": DONE, "more_body": False})
        finally:
            watcher.cancel()


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _plain(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


app = StreamingWorkload()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m drainsafe.workload.streaming",
        description="LLM-like OpenAI-style SSE server under plain uvicorn.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
