"""Every setting of `drainsafe serve`, `drainsafe run` and `drainsafe.asgi`, with its default.

One home, as uvicorn keeps its settings in uvicorn/config.py `Config`: the lifecycle's
timings, the admin port, the admin endpoints' paths, the connection limits, and the readers
of the environment (the middleware's admin port, the pod's grace period). It imports
nothing from drainsafe, so the command line, the server modules, `drainsafe check` (which
recognises these defaults in manifests) and `drainsafe verify` (which reads the admin port)
can all read it without importing each other.

The default timings fit the default 30 s grace period with drainsafe.budget's 5 s buffer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DRAIN_DELAY = 5.0
DEFAULT_SHUTDOWN_TIMEOUT = 20.0
DEFAULT_IDLE_GRACE = 0.5
DEFAULT_FLUSH = 1.0

DEFAULT_ADMIN_HOST = "0.0.0.0"
"""Every interface, as the kubelet probes the pod IP and a preStop httpGet goes there too.
No Service routes to the port unless a manifest lists it, and a NetworkPolicy keeps other
pods off it (docs/server.md)."""
DEFAULT_ADMIN_PORT = 8490
ADMIN_PORT_NAME = "drainsafe-admin"
"""The admin container port's name in manifests: drainsafe check recognises probes and
preStop on it, drainsafe verify reads a terminating pod's metrics through it."""

DEFAULT_READY_PATH = "/readyz"
DEFAULT_LIVE_PATH = "/livez"
DEFAULT_DRAIN_PATH = "/drainsafe/drain"
DEFAULT_METRICS_PATH = "/metrics"

DEFAULT_HEADER_TIMEOUT = 10.0
"""A request head must be complete within this (as nginx `client_header_timeout`)."""
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
"""uvicorn's `timeout_keep_alive` default (uvicorn/config.py)."""

ENV_ADMIN_HOST = "DRAINSAFE_ADMIN_HOST"
ENV_ADMIN_PORT = "DRAINSAFE_ADMIN_PORT"
ENV_ADMIN_TOKEN_FILE = "DRAINSAFE_ADMIN_TOKEN_FILE"
ENV_GRACE = "DRAINSAFE_GRACE_SECONDS"
"""The pod's terminationGracePeriodSeconds, checked against the settings at start-up."""


@dataclass(frozen=True)
class Settings:
    """The lifecycle's timings (drainsafe.server.lifecycle)."""

    drain_delay: float = DEFAULT_DRAIN_DELAY
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    idle_grace: float = DEFAULT_IDLE_GRACE
    """In CLOSING, an idle keep-alive connection is closed once idle this long; a request
    that arrives on it sooner is still served (with Connection: close). Closing at once
    races with a client or proxy sending on that connection (uvicorn discussion #2315)."""
    flush: float = DEFAULT_FLUSH
    """After cutting streams at the deadline, time given to write the marker and close."""

    def __post_init__(self) -> None:
        for name in ("drain_delay", "shutdown_timeout", "idle_grace", "flush"):
            value = getattr(self, name)
            if not value >= 0:  # also rejects NaN
                raise ValueError(f"{name.replace('_', '-')} must be >= 0 seconds, got {value}")


@dataclass(frozen=True)
class Paths:
    """The runtime's own endpoints, on the admin port only (drainsafe.server.admin)."""

    ready: str = DEFAULT_READY_PATH
    live: str = DEFAULT_LIVE_PATH
    drain: str = DEFAULT_DRAIN_PATH
    metrics: str = DEFAULT_METRICS_PATH


@dataclass(frozen=True)
class Limits:
    """What a client can make one connection of drainsafe's own listeners hold
    (drainsafe.server.http1 enforces them)."""

    request_line: int = 8192
    header_line: int = 8192
    head: int = 32768
    headers: int = 100
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT
    pipelined: int = 16


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class AdminSettings:
    host: str = DEFAULT_ADMIN_HOST
    port: int = DEFAULT_ADMIN_PORT
    token: str | None = None
    """When set, the drain trigger needs it in `X-Drainsafe-Token`."""
    limits: Limits = DEFAULT_LIMITS


def port_number(text: str) -> int:
    """A TCP port (0-65535) from text, or ValueError."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise ValueError(f"{text!r} is not a port number (0-65535)")
    return int(text)


def read_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped), or ValueError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--admin-token-file {path}: cannot read it ({exc})") from None
    if not text:
        raise ValueError(f"--admin-token-file {path}: the file is empty")
    if any(not 0x21 <= ord(c) <= 0x7E for c in text):
        raise ValueError(f"--admin-token-file {path}: the token must be visible ASCII "
                         "(it is sent as a header value)")
    return text


def admin_settings_from_env(environ: Mapping[str, str]) -> AdminSettings:
    """The middleware's admin port from DRAINSAFE_ADMIN_HOST, DRAINSAFE_ADMIN_PORT and
    DRAINSAFE_ADMIN_TOKEN_FILE (a uvicorn command line has no room for drainsafe's flags);
    ValueError naming the variable when one is wrong."""
    host = environ.get(ENV_ADMIN_HOST, "").strip() or DEFAULT_ADMIN_HOST
    text = environ.get(ENV_ADMIN_PORT, "").strip()
    port = DEFAULT_ADMIN_PORT
    if text:
        try:
            port = port_number(text)
        except ValueError:
            raise ValueError(f"{ENV_ADMIN_PORT}={text!r} is not a port number") from None
    token_file = environ.get(ENV_ADMIN_TOKEN_FILE, "").strip()
    token = read_token(token_file) if token_file else None
    return AdminSettings(host=host, port=port, token=token)


def parse_grace(value: str | None) -> float | None:
    """DRAINSAFE_GRACE_SECONDS as seconds, or ValueError naming the variable."""
    if value is None or value.strip() == "":
        return None
    try:
        grace = float(value)
    except ValueError:
        raise ValueError(f"{ENV_GRACE}={value!r} is not a number of seconds") from None
    if not grace >= 0:
        raise ValueError(f"{ENV_GRACE}={value!r} must be >= 0")
    return grace
