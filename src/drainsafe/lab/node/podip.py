"""Pod IPs on loopback: 127.10.<node subnet>.<n>, one address per pod.

Linux routes all of 127.0.0.0/8 to lo, so every pod can bind its own address and pods on
different "nodes" may use the same port. The node's own address (hostIP) is .1 of its
subnet; pods get .2 to .254. A lab picks a random first subnet, and an address whose
declared container ports are already taken on this machine (another lab, another test) is
skipped, so concurrent labs do not collide.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

POD_NETWORK_PREFIX = "127.10"
FIRST_POD_HOST = 2
LAST_POD_HOST = 254


def node_subnet(base: int, index: int) -> int:
    return (base + index) % 256


def host_ip(subnet: int) -> str:
    return f"{POD_NETWORK_PREFIX}.{subnet}.1"


class PodIPExhausted(RuntimeError):
    pass


class PodIPs:
    """Allocates pod IPs within one node's subnet."""

    def __init__(self, subnet: int) -> None:
        if not 0 <= subnet <= 255:
            raise ValueError(f"node subnet {subnet} is outside 0..255")
        self.subnet = subnet
        self.in_use: dict[str, str] = {}  # ip -> pod uid
        self._next = FIRST_POD_HOST

    def allocate(self, uid: str, ports: Iterable[int] = ()) -> str:
        wanted = list(ports)
        span = LAST_POD_HOST - FIRST_POD_HOST + 1
        for step in range(span):
            host = FIRST_POD_HOST + (self._next - FIRST_POD_HOST + step) % span
            ip = f"{POD_NETWORK_PREFIX}.{self.subnet}.{host}"
            if ip in self.in_use or not ports_free(ip, wanted):
                continue
            self.in_use[ip] = uid
            # Round-robin, so a just-freed address is not handed out again at once.
            self._next = host + 1 if host < LAST_POD_HOST else FIRST_POD_HOST
            return ip
        raise PodIPExhausted(f"no free pod IP in {POD_NETWORK_PREFIX}.{self.subnet}.0/24")

    def release(self, ip: str) -> None:
        self.in_use.pop(ip, None)


def ports_free(ip: str, ports: Iterable[int]) -> bool:
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((ip, port))
            except OSError:
                return False
    return True


def declared_tcp_ports(pod: dict[str, object]) -> list[int]:
    spec = pod.get("spec") or {}
    assert isinstance(spec, dict)
    found: list[int] = []
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                if str(port.get("protocol") or "TCP").upper() == "TCP":
                    found.append(int(port["containerPort"]))
    return found
