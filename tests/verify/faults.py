"""Small real TCP servers that misbehave in exactly one way each, for verify's tests.

Each handler speaks just enough HTTP/1.1 over a real socket (keep-alive included) to produce
one failure kind the way a real server or proxy would during a shutdown.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from drainsafe.marker import sse_error_event

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def events(n: int) -> bytes:
    return b"".join(chunk(f"data: {{\"token\": {i}}}\n\n".encode()) for i in range(n))


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":", 1)[1]))
    return head


def rst(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def serve_each(respond: Callable[[asyncio.StreamWriter], Awaitable[bool]]) -> Handler:
    """Keep-alive loop: answer requests until `respond` returns False (it closed)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await read_request(reader) is not None:
                if not await respond(writer):
                    return
            writer.close()
        except ConnectionError:
            pass

    return handler


async def _ok_sse(writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + events(3) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    return True


async def _ok_plain(writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()
    return True


def _status(code: int) -> Callable[[asyncio.StreamWriter], Awaitable[bool]]:
    async def respond(writer: asyncio.StreamWriter) -> bool:
        writer.write(f"HTTP/1.1 {code} Error\r\ncontent-length: 3\r\n\r\nerr".encode())
        await writer.drain()
        return True
    return respond


async def _reset(writer: asyncio.StreamWriter) -> bool:
    rst(writer)
    return False


async def _reset_mid_stream(writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + events(2))
    await writer.drain()
    await asyncio.sleep(0.05)
    rst(writer)
    return False


async def _close(writer: asyncio.StreamWriter) -> bool:
    writer.close()
    return False


async def _truncated_sse(writer: asyncio.StreamWriter) -> bool:
    # Clean chunked ending, but the stream never says [DONE]: uvicorn-style cancel, or vLLM's
    # engine abort without the marker.
    writer.write(SSE_HEAD + events(3) + b"0\r\n\r\n")
    await writer.drain()
    return True


async def _broken_chunked(writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + events(2) + b"zz\r\nnot a chunk\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    return False


async def _cut_chunked(writer: asyncio.StreamWriter) -> bool:
    # The connection closes mid-body without the terminating zero-length chunk.
    writer.write(SSE_HEAD + events(2))
    await writer.drain()
    writer.close()
    return False


async def _drain_marker(writer: asyncio.StreamWriter) -> bool:
    writer.write(SSE_HEAD + events(2) + chunk(sse_error_event()) + b"0\r\n\r\n")
    await writer.drain()
    return True


FAULTS: dict[str, Callable[[asyncio.StreamWriter], Awaitable[bool]]] = {
    "ok_sse": _ok_sse,
    "ok_plain": _ok_plain,
    "http_500": _status(500),
    "http_502": _status(502),
    "http_503": _status(503),
    "reset": _reset,
    "reset_mid_stream": _reset_mid_stream,
    "closed": _close,
    "truncated_sse": _truncated_sse,
    "broken_chunked": _broken_chunked,
    "cut_chunked": _cut_chunked,
    "drain_marker": _drain_marker,
}


@asynccontextmanager
async def fault_server(name: str) -> AsyncIterator[str]:
    """A server on 127.0.0.1 (port chosen by the kernel) answering every request with `name`."""
    if name == "refused":
        async with refused_port() as url:
            yield url
        return
    if name == "timeout":
        async with silent_server() as url:
            yield url
        return
    server = await asyncio.start_server(serve_each(FAULTS[name]), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1/completions"
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def refused_port() -> AsyncIterator[str]:
    # Bound but not listening: connects are refused, and nobody else can take the port meanwhile.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        sock.close()


@asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """Accepts and reads the request, then never answers."""
    done = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await read_request(reader)
        await done.wait()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        done.set()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()
