"""A kube-proxy-like L4 path: a TCP listener on each Service's ClusterIP:port.

What a client sees through kube-proxy (iptables/IPVS DNAT), kept here:
- each new connection goes to one backend, chosen at random among the ready endpoints the
  proxy knows of *now* (its view lags the API by the propagation delay);
- no retries: if that backend refuses the connection, the client's connection is reset at
  once, so the client sees the failure (kube-proxy DNATs the SYN; the RST comes back);
- established connections stay with their backend when endpoints change; a backend that
  resets or dies resets the client's connection too;
- a Service with no endpoints rejects connections (kube-proxy installs a REJECT rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from drainsafe.lab.netpath.endpoints import Key, ServiceView

log = logging.getLogger(__name__)

Address = tuple[str, int]
CONNECT_TIMEOUT = 5.0
CHUNK = 65536


@dataclass
class ProxyStats:
    accepted: int = 0
    rejected_no_endpoint: int = 0
    backend_refused: int = 0
    bind_errors: dict[str, str] = field(default_factory=dict)


class L4Proxy:
    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.backends: dict[Address, tuple[str, ...]] = {}
        self.stats = ProxyStats()
        self._servers: dict[Address, asyncio.base_events.Server] = {}
        self._connections: set[asyncio.Task[None]] = set()
        # (loop time, ClusterIP:port, backends) at every change, for race analysis.
        self.history: list[tuple[float, Address, tuple[str, ...]]] = []
        # Connections the backend closed without sending a byte (time, backend).
        self.empty_replies: list[tuple[float, str]] = []

    @property
    def listening(self) -> list[Address]:
        return sorted(self._servers)

    async def apply(self, views: Mapping[Key, ServiceView]) -> None:
        wanted: dict[Address, tuple[str, ...]] = {}
        for view in views.values():
            for port in view.ports:
                if port.protocol.upper() == "TCP":
                    wanted[(view.cluster_ip, port.port)] = port.backends
        now = asyncio.get_running_loop().time()
        for address, backends in wanted.items():
            if self.backends.get(address) != backends:
                self.history.append((now, address, backends))
        self.backends = wanted
        for address in list(self._servers):
            if address not in wanted:
                server = self._servers.pop(address)
                server.close()  # stops listening; established connections stay
        for address in wanted:
            if address not in self._servers:
                await self._listen(address)

    async def _listen(self, address: Address) -> None:
        host, port = address
        try:
            server = await asyncio.start_server(
                lambda r, w: self._accept(address, r, w), host, port, reuse_address=True)
        except OSError as exc:
            self.stats.bind_errors[f"{host}:{port}"] = str(exc)
            log.error("L4 proxy cannot listen on %s:%s: %s", host, port, exc)
            return
        self.stats.bind_errors.pop(f"{host}:{port}", None)
        self._servers[address] = server

    def _accept(self, address: Address, reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(address, reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, address: Address, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        backends = self.backends.get(address, ())
        if not backends:
            self.stats.rejected_no_endpoint += 1
            _reset(writer)
            return
        host, _, port = self.rng.choice(backends).rpartition(":")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except (OSError, TimeoutError):
            self.stats.backend_refused += 1
            _reset(writer)
            return
        try:
            sent = await _splice(reader, writer, up_reader, up_writer)
            if sent == 0:
                self.empty_replies.append((asyncio.get_running_loop().time(), f"{host}:{port}"))
        finally:
            for w in (writer, up_writer):
                if not w.is_closing():
                    w.close()

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)


async def _splice(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                  up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter) -> int:
    """Copy both ways until both sides are done; a reset on one side resets the other.
    Returns the number of bytes the backend sent."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                   other: asyncio.StreamWriter) -> int:
        moved = 0
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    if dst.can_write_eof() and not dst.is_closing():
                        dst.write_eof()
                    return moved
                moved += len(data)
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            _reset(dst)
            _reset(other)
        return moved

    _, down = await asyncio.gather(pump(client_r, up_w, client_w), pump(up_r, client_w, up_w))
    return down


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), so the peer sees a reset, not an orderly close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
