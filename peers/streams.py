"""One streaming completion against an OpenAI-compatible server, and how it ended.

A stream counts as ok only when the server says it finished the generation it was asked
for: HTTP 200, a final chunk with `finish_reason: "length"` (ignore_eos, so the model
cannot stop early), usage reporting every requested token, then `data: [DONE]`. HTTP
status and `[DONE]` alone are not enough: vLLM ends streams that its engine aborted with
HTTP 200, `finish_reason: "abort"` and `[DONE]` (vllm-project/vllm issue #57082; the
values are `FINISH_REASON_STRINGS` in vllm/v1/engine/__init__.py at 0.32.0).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from drainsafe.marker import DRAIN_ERROR_TYPE

OK = "ok"


@dataclass
class Stream:
    """What one client saw; `outcome` is OK or what went wrong, as a short phrase."""

    started: float = 0.0
    outcome: str = "open"
    chunks: int = 0
    first_token: float | None = None
    last_data: float | None = None
    progress: list[tuple[float, int]] = field(default_factory=list)
    """(time, completion tokens so far), one entry per chunk (vLLM's continuous usage)."""
    ended: float | None = None
    detail: str = ""
    """The client's error text, for the failure message."""
    first_token_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ok(self) -> bool:
        return self.outcome == OK


def plain_client(timeout: float | httpx.Timeout) -> httpx.AsyncClient:
    """A client for plain HTTP to 127.0.0.1. No TLS context: httpx builds one for every
    client by default, loading certifi's bundle, 35 ms of CPU each on the loaded 2-core
    machine, which put the late streams (a client and a readiness probe each) seconds
    behind their schedule after SIGTERM."""
    return httpx.AsyncClient(timeout=timeout, verify=False)


def _error_event(data: dict[str, object]) -> str | None:
    error = data.get("error")
    if not isinstance(error, dict):
        return None
    if error.get("type") == DRAIN_ERROR_TYPE:
        return "drainsafe deadline event"
    return f"error event ({error.get('code') or error.get('type')})"


def _usage(data: dict[str, object]) -> int | None:
    """completion_tokens of the usage chunk (no choices), else None."""
    usage = data.get("usage")
    if isinstance(usage, dict) and not data.get("choices"):
        tokens = usage.get("completion_tokens")
        return tokens if isinstance(tokens, int) else -1
    return None


def _running_usage(data: dict[str, object]) -> int | None:
    """completion_tokens so far, on a chunk with choices (stream_options
    continuous_usage_stats; vllm/entrypoints/openai/completion/serving.py at 0.32.0)."""
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None


def rate(s: Stream, window: float, now: float, settle: float) -> float | None:
    """Tokens per second over the last `window` seconds of the stream's progress, leaving
    out its first `settle` seconds (None until what is left spans 90 % of the window).
    A stream's first seconds are no measure of the rest: streams sized from a reading over
    them (half a window, from the first token) of ~1,100 tokens/s then ran at 47/s."""
    if s.first_token is None:
        return None
    recent = [(t, n) for t, n in s.progress
              if t >= max(now - window, s.first_token + settle)]
    if len(recent) < 2 or recent[-1][0] - recent[0][0] < window * 0.9:
        return None
    (t0, n0), (t1, n1) = recent[0], recent[-1]
    return (n1 - n0) / (t1 - t0)


async def stream(base_url: str, model: str, max_tokens: int, *, read_timeout: float,
                 into: Stream | None = None) -> Stream:
    """POST one streaming completion on a connection of its own (a proxy that has not
    caught up opens new connections to the pod) and follow it to its end; `into` shows
    progress while it runs."""
    result = into or Stream()
    result.started = time.monotonic()
    body = {"model": model, "prompt": "w1 w2 w3 w4", "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    finish: str | None = None
    error: str | None = None
    tokens: int | None = None
    done = False
    timeout = httpx.Timeout(connect=5.0, read=read_timeout, write=5.0, pool=5.0)
    try:
        async with plain_client(timeout) as client, client.stream(
                "POST", f"{base_url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                result.outcome = f"HTTP {response.status_code}"
                return result
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                try:
                    data = json.loads(payload)
                except ValueError:
                    error = error or f"unreadable chunk ({event or 'data'})"
                    continue
                error = error or _error_event(data)
                tokens = _usage(data) if tokens is None else tokens
                now = result.last_data = time.monotonic()
                for choice in data.get("choices") or ():
                    result.chunks += 1
                    if result.first_token is None:
                        result.first_token = now
                        result.first_token_seen.set()
                    finish = choice.get("finish_reason") or finish
                    so_far = _running_usage(data)
                    if so_far is not None:
                        result.progress.append((now, so_far))
    except httpx.ConnectError as exc:
        result.outcome, result.detail = "refused", repr(exc)
    except httpx.ConnectTimeout as exc:
        # The listener is there but nothing accepts (a server busy shutting down).
        result.outcome, result.detail = "connect timed out", repr(exc)
    except httpx.ReadTimeout:
        result.outcome = f"stalled (no data for {read_timeout:g} s)"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        result.outcome = "closed mid-stream" if result.chunks else "closed before a token"
        result.detail = repr(exc)
    except httpx.HTTPError as exc:
        # Any other way the client failed is still an outcome of this stream, not a crash
        # of the measurement.
        result.outcome, result.detail = f"client error {type(exc).__name__}", repr(exc)
    else:
        then = "+ [DONE]" if done else "no [DONE]"
        if error is not None:
            result.outcome = error
        elif finish is None:
            result.outcome = f"ended without a final event, {then}"
        elif finish != "length":
            result.outcome = f"finish_reason {finish} {then}"
        elif tokens != max_tokens:
            result.outcome = f"usage {tokens} of {max_tokens} tokens"
        elif not done:
            result.outcome = "no [DONE]"
        else:
            result.outcome = OK
    finally:
        result.ended = time.monotonic()
        result.first_token_seen.set()
    return result


def summary(streams: Iterable[Stream]) -> str:
    """`4 ok` or `1 HTTP 500, 5 refused`: outcomes by count, most frequent first."""
    counts = Counter(s.outcome for s in streams)
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.most_common()) or "none"
