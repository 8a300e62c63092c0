"""A child server that breaks HTTP on purpose, for the proxy's upstream tests.

    python raw_child.py PORT

GET /garbage-after: a valid response, then bytes that are not HTTP, in one write.
GET /garbage-only: only bytes that are not HTTP. Any other path: a valid 200 "fine".
"""

from __future__ import annotations

import asyncio
import sys

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path == b"/garbage-after":
                writer.write(RESPONSE % (2, b"ok") + b"\x00\x01 not http\r\n\r\n")
            elif path == b"/garbage-only":
                writer.write(b"\x00\x01 not http at all\r\n\r\n")
            else:
                writer.write(RESPONSE % (4, b"fine"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
