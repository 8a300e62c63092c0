"""Fixtures for verify's tests: a real uvicorn serving tests/verify/target_app.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

TESTS_DIR = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    url: str
    process: subprocess.Popen[bytes]


def start_uvicorn(*extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    """uvicorn on a socket we bind (port chosen by the kernel), handed over with --fd."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "uvicorn", "--app-dir", str(TESTS_DIR), "--fd",
           str(sock.fileno()), "--log-level", "warning", "--no-access-log", *extra,
           "verify.target_app:app"]
    process = subprocess.Popen(cmd, pass_fds=(sock.fileno(),), start_new_session=True)
    sock.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                return url, process
        except httpx.HTTPError:
            time.sleep(0.05)
    stop_process(process)
    raise RuntimeError("uvicorn did not answer within 30 s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def target() -> Iterator[Target]:
    url, process = start_uvicorn()
    try:
        yield Target(url, process)
    finally:
        stop_process(process)
