"""A small real ASGI target for verify's tests and benchmark (served by real uvicorn).

Routes:
  /ok                          200 "ok"
  /sse?tokens=N&interval=S     SSE stream ending with data: [DONE]
  /sse-cut?tokens=N            SSE stream that ends cleanly but without [DONE]
  /status/NNN                  that status
  /pattern                     per client (User-Agent), the n-th request gets 503 if n % 4 == 3,
                               500 if n % 10 == 9, else 200; /tally returns what was sent
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import parse_qs

Scope = dict[str, Any]

_seen: defaultdict[str, int] = defaultdict(int)
_tally: defaultdict[str, Counter[int]] = defaultdict(Counter)


async def _send_simple(send: Any, status: int, body: bytes, ctype: bytes = b"text/plain") -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _drain_body(receive: Any) -> None:
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)


async def app(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await _drain_body(receive)
    path: str = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
    if path == "/ok":
        await _send_simple(send, 200, b"ok")
    elif path in ("/sse", "/sse-cut"):
        tokens = int(query.get("tokens", "5"))
        interval = float(query.get("interval", "0"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(tokens):
            if interval:
                await asyncio.sleep(interval)
            await send({"type": "http.response.body", "body": f"data: {{\"t\": {i}}}\n\n".encode(),
                        "more_body": True})
        end = b"data: [DONE]\n\n" if path == "/sse" else b""
        await send({"type": "http.response.body", "body": end})
    elif path.startswith("/status/"):
        await _send_simple(send, int(path.rsplit("/", 1)[1]), b"status")
    elif path == "/pattern":
        agent = dict(scope["headers"]).get(b"user-agent", b"").decode().split("/")[0]
        n = _seen[agent]
        _seen[agent] += 1
        status = 500 if n % 10 == 9 else 503 if n % 4 == 3 else 200
        _tally[agent][status] += 1
        await _send_simple(send, status, b"pattern")
    elif path == "/tally":
        body = json.dumps({a: {str(k): v for k, v in c.items()} for a, c in _tally.items()})
        await _send_simple(send, 200, body.encode(), b"application/json")
    else:
        await _send_simple(send, 404, b"not found")
