"""Server shutdown flags and the signal path, from container command lines."""

from __future__ import annotations

import pytest

from drainsafe.check.hooks import exec_sleep_seconds
from drainsafe.check.servers import command_line, identify, signal_forwarded


@pytest.mark.parametrize("command, args, server, deadline, drains", [
    (["uvicorn", "app:app"], None, "uvicorn", None, True),
    (["python", "-m", "uvicorn", "app:app", "--timeout-graceful-shutdown=45"], None, "uvicorn",
     45.0, True),
    (["gunicorn", "-k", "uvicorn.workers.UvicornWorker", "app:app"], None, "gunicorn", 30.0,
     True),
    (["hypercorn", "app:app", "--graceful-timeout", "20"], None, "hypercorn", 20.0, True),
    (["hypercorn", "app:app"], None, "hypercorn", 3.0, True),
    (["vllm", "serve", "m"], None, "vllm", 0.0, False),
    (["vllm", "serve"], ["m", "--shutdown-timeout", "60"], "vllm", 60.0, True),
    # Not vLLM flags at any release read (v0.18.0, v0.32.0): no drain.
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--shutdown-mode", "drain"],
     "vllm", 0.0, False),
    (["tritonserver", "--exit-timeout-secs=15"], None, "triton", 15.0, True),
    (["python3", "-m", "sglang.launch_server", "--model", "m"], None, "sglang", None, True),
    (["text-generation-launcher"], None, "tgi", 90.0, True),
    (["drainsafe", "serve", "--drain-delay", "8", "--shutdown-timeout", "70", "app:app"], None,
     "drainsafe", 70.0, True),
    (["/bin/sh", "-c", "exec vllm serve m --shutdown-timeout 30"], None, "vllm", 30.0, True),
])
def test_identify(command: list[str], args: list[str] | None, server: str,
                  deadline: float | None, drains: bool) -> None:
    found = identify(command_line(command, args))
    assert found is not None
    assert (found.server, found.deadline, found.drains) == (server, deadline, drains)


def test_unknown_and_image_entrypoint() -> None:
    assert identify(command_line(["nginx", "-g", "daemon off;"], None)) is None
    assert command_line(None, None) is None
    assert signal_forwarded(None)


def test_drainsafe_built_in_delay() -> None:
    found = identify(command_line(["drainsafe", "run", "--drain-delay=12", "--", "app"], None))
    assert found is not None and found.drain_delay == 12.0


@pytest.mark.parametrize("command, seconds", [
    (("sleep", "15"), 15.0),
    (("/bin/sh", "-c", "sleep 10"), 10.0),
    (("/bin/sh", "-c", "touch /tmp/drain; sleep 20"), 20.0),
    (("/bin/sh", "-c", "touch /tmp/drain"), None),
    (("/app/drain-hook",), None),
])
def test_exec_sleep_seconds(command: tuple[str, ...], seconds: float | None) -> None:
    assert exec_sleep_seconds(command) == seconds


def test_drainsafe_defaults_come_from_serve() -> None:
    from drainsafe.server.config import DEFAULT_DRAIN_DELAY, DEFAULT_SHUTDOWN_TIMEOUT

    found = identify(command_line(["drainsafe", "serve", "app:app"], None))
    assert found is not None
    assert (found.deadline, found.drain_delay) == (DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_DRAIN_DELAY)
