"""The project's one nginx runner: a private nginx on loopback, as kube-proxy or an ingress.

Two upstream shapes, matching what sits in front of a pod in a cluster:

- `StreamUpstream`: L4 (`stream` module) with no retries (`proxy_next_upstream off`), as
  kube-proxy behaves: a TCP connection goes to one endpoint, chosen when it is opened, and a
  refused or reset connection reaches the client as a failure.
- `HttpUpstream`: L7 (`http` module) with pooled keep-alive upstream connections and nginx's
  default retry rules (`proxy_next_upstream error timeout`; POST not retried once sent), as
  ingress-nginx behaves; `proxy_buffering off` so SSE passes through as it is written.
  Sources: nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_next_upstream,
  nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_next_upstream.

Endpoint removal is a reload (HUP): the master starts new workers with the new config and
old workers finish their clients (nginx.org/en/docs/control.html). Each `Nginx` lives in its
own work directory with its own pid file, error log (`-e`, so /var/log/nginx is never
touched) and temp paths, and stops only its own processes.

`render_config` is pure; `Nginx` is the thin process shell.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
"""Debian's libnginx-mod-stream; loaded explicitly since the system config is not used."""


class NginxError(RuntimeError):
    """nginx refused a config, failed to start, or did not do what was asked in time."""


@dataclass(frozen=True)
class StreamUpstream:
    """An L4 listener balancing TCP connections over `servers` ("host:port"), no retries."""

    name: str
    listen: str
    servers: Sequence[str]


@dataclass(frozen=True)
class HttpUpstream:
    """An L7 listener proxying HTTP/1.1 over pooled keep-alive connections to `servers`."""

    name: str
    listen: str
    servers: Sequence[str]
    keepalive: int = 32
    read_timeout: float = 120.0


def render_config(
    *,
    stream: Sequence[StreamUpstream] = (),
    http: Sequence[HttpUpstream] = (),
    workdir: Path | str,
    worker_processes: int = 1,
    stream_module: Path | None = STREAM_MODULE,
) -> str:
    """The whole nginx.conf text for these upstreams, with every path inside `workdir`."""
    work = Path(workdir)
    _check_names([*stream, *http])
    lines: list[str] = []
    if stream and stream_module is not None:
        lines.append(f"load_module {stream_module};")
    lines += [
        "daemon off;",
        "master_process on;",
        f"worker_processes {worker_processes};",
        f"pid {work / 'nginx.pid'};",
        f"error_log {work / 'error.log'} notice;",
        # Old workers of a reload must not linger past a test; in-flight work gets this long.
        "worker_shutdown_timeout 60s;",
        "events { worker_connections 4096; }",
    ]
    if stream:
        lines.append("stream {")
        for up in stream:
            lines.append(f"  upstream {up.name} {{")
            lines += [f"    server {s};" for s in _servers(up)]
            lines.append("  }")
            lines += [
                "  server {",
                f"    listen {up.listen};",
                f"    proxy_pass {up.name};",
                # kube-proxy does not retry a connection on another endpoint.
                "    proxy_next_upstream off;",
                "    proxy_connect_timeout 5s;",
                "    proxy_timeout 10m;",
                "  }",
            ]
        lines.append("}")
    if http:
        lines += [
            "http {",
            f"  access_log {work / 'access.log'};",
            f"  client_body_temp_path {work / 'client_body'};",
            f"  proxy_temp_path {work / 'proxy'};",
            f"  fastcgi_temp_path {work / 'fastcgi'};",
            f"  uwsgi_temp_path {work / 'uwsgi'};",
            f"  scgi_temp_path {work / 'scgi'};",
            "  keepalive_timeout 75s;",
            "  keepalive_requests 100000;",
        ]
        for hup in http:
            lines.append(f"  upstream {hup.name} {{")
            lines += [f"    server {s};" for s in _servers(hup)]
            lines += [f"    keepalive {hup.keepalive};", "  }"]
            lines += [
                "  server {",
                f"    listen {hup.listen};",
                "    location / {",
                f"      proxy_pass http://{hup.name};",
                # Upstream keep-alive needs HTTP/1.1 and an empty Connection header.
                "      proxy_http_version 1.1;",
                '      proxy_set_header Connection "";',
                "      proxy_buffering off;",
                "      proxy_request_buffering off;",
                f"      proxy_read_timeout {hup.read_timeout:g}s;",
                "    }",
                "  }",
            ]
        lines.append("}")
    return "\n".join(lines) + "\n"


def _servers(up: StreamUpstream | HttpUpstream) -> list[str]:
    # nginx rejects an empty upstream block; a pod with no endpoints is a down placeholder.
    return list(up.servers) or ["127.255.255.254:9 down"]


def _check_names(upstreams: Sequence[StreamUpstream | HttpUpstream]) -> None:
    seen: set[str] = set()
    for up in upstreams:
        if not up.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"upstream name {up.name!r}: use letters, digits, '-' and '_'")
        if up.name in seen:
            raise ValueError(f"upstream name {up.name!r} is used twice")
        seen.add(up.name)


@dataclass
class Nginx:
    """One private nginx instance in `workdir` (created if missing)."""

    workdir: Path
    binary: str = "nginx"
    startup_timeout: float = 10.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)

    @property
    def conf_path(self) -> Path:
        return self.workdir / "nginx.conf"

    @property
    def pid_path(self) -> Path:
        return self.workdir / "nginx.pid"

    @property
    def error_log(self) -> Path:
        return self.workdir / "error.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, config: str) -> None:
        """Write `config`, test it, and start nginx in the foreground as a child process."""
        if self._proc is not None:
            raise NginxError("nginx already started; use reload()")
        if shutil.which(self.binary) is None:
            raise NginxError(f"{self.binary} not found; install nginx-light libnginx-mod-stream")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write(config)
        self._test()
        self._proc = subprocess.Popen(
            self._argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "stderr.log", "ab"),  # noqa: SIM115 - child owns it
        )
        deadline = time.monotonic() + self.startup_timeout
        while not self._workers():
            if self._proc.poll() is not None:
                raise NginxError(f"nginx exited at start-up: {self._tail_log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise NginxError(f"nginx workers not up after {self.startup_timeout}s")
            time.sleep(0.02)

    def reload(self, config: str) -> None:
        """Write `config`, test it, send HUP, and return once the new workers are running."""
        if self._proc is None or self._proc.poll() is not None:
            raise NginxError("nginx is not running")
        self._write(config)
        self._test()
        before = set(self._workers())
        os.kill(self._proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            now = self._workers_with_config()
            if now - before:
                return
            if time.monotonic() > deadline:
                raise NginxError(f"no new nginx workers after reload: {self._tail_log()}")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop this instance (fast shutdown, then kill); other nginx processes are untouched."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        workers = self._workers(master=proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        for pid in workers:  # only our own master's workers, if any outlived it
            with contextlib.suppress(OSError):
                if b"nginx: worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Nginx:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _argv(self, *extra: str) -> list[str]:
        return [
            self.binary,
            "-p", str(self.workdir),
            "-c", str(self.conf_path),
            "-e", str(self.error_log),
            *extra,
        ]

    def _write(self, config: str) -> None:
        tmp = self.conf_path.with_suffix(".tmp")
        tmp.write_text(config)
        tmp.replace(self.conf_path)

    def _test(self) -> None:
        done = subprocess.run(self._argv("-t", "-q"), capture_output=True, text=True,
                              timeout=30, check=False)
        if done.returncode != 0:
            raise NginxError(f"nginx config rejected ({self.conf_path}): {done.stderr.strip()}")

    def _workers(self, master: int | None = None) -> list[int]:
        """Pids of the worker processes whose parent is our master."""
        parent = master if master is not None else self.pid
        if parent is None:
            return []
        return [pid for pid, _ in _children(parent)]

    def _workers_with_config(self) -> set[int]:
        # A worker still shutting down after a reload names itself "shutting down".
        parent = self.pid
        if parent is None:
            return set()
        return {pid for pid, cmd in _children(parent) if "shutting down" not in cmd}

    def _tail_log(self) -> str:
        try:
            return self.error_log.read_text()[-2000:]
        except OSError:
            return "(no error log)"


def _children(parent: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of processes whose parent is `parent`, from /proc."""
    found: list[tuple[int, str]] = []
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return found
    for text in children:
        pid = int(text)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "worker process" in cmd:
            found.append((pid, cmd))
    return found
