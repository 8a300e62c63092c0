"""Two replicas behind real nginx, constant streaming load, one replica drained.

The scenario of issue 3, scaled down: streams of 0.5 s over keep-alive connections, drain
delay 1 s, endpoint removal (nginx reload) 0.5 s after SIGTERM, deadline 3 s. L4 (`stream`,
no retries, like kube-proxy) and L7 (`http` keep-alive upstream, like an ingress).
drainsafe serve and drainsafe run replicas must lose nothing; plain uvicorn must be seen
losing requests, which proves the harness sees failures.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_harness import (
    LoadResult,
    free_port,
    replicas,
    streaming_load,
    wait_exit,
)

from drainsafe.lab.netpath.nginx import HttpUpstream, Nginx, StreamUpstream, render_config

pytestmark = pytest.mark.e2e

DRAIN_DELAY = 1.0
PROPAGATION = 0.5
DEADLINE = 3.0
# Answers the load has before SIGTERM (as many as it has workers), so that
# both replicas are serving streams when the drain begins.
WARM_UP_ANSWERS = 16


def _config(layer: str, listen: str, servers: list[str], workdir: Path) -> str:
    if layer == "l4":
        return render_config(stream=[StreamUpstream("pods", listen, servers)], workdir=workdir)
    return render_config(http=[HttpUpstream("pods", listen, servers)], workdir=workdir)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    instance = Nginx(tmp_path / "nginx")
    try:
        yield instance
    finally:
        instance.stop()


async def steady(result: LoadResult, answers: int) -> None:
    """Until the load has had `answers` answers: on a slow machine the first streams take
    longer, and a fixed warm-up can end before any has finished."""
    async with asyncio.timeout(60):
        while result.total < answers:
            await asyncio.sleep(0.05)


async def drain_one_replica(kind: str, layer: str, tmp_path: Path, nginx: Nginx
                            ) -> tuple[LoadResult, int | None, str, str, int]:
    """(load result, drained replica's exit code, its log, nginx's errors, answers had
    before SIGTERM)."""
    with replicas(kind, tmp_path, 2, drain_delay=DRAIN_DELAY,
                  shutdown_timeout=DEADLINE) as (a, b):
        listen = f"127.0.0.1:{free_port()}"
        nginx.start(_config(layer, listen, [a.address, b.address], nginx.workdir))
        async with streaming_load(f"http://{listen}/v1/completions",
                                  l7_proxy=layer == "l7") as result:
            await steady(result, WARM_UP_ANSWERS)
            assert result.failed == 0, result.summary()
            before = result.ok
            a.signal(signal.SIGTERM)
            await asyncio.sleep(PROPAGATION)
            # Endpoint removal reaches the proxy only now, while A still drains.
            await asyncio.to_thread(nginx.reload,
                                    _config(layer, listen, [b.address], nginx.workdir))
            code = await wait_exit(a.proc, DRAIN_DELAY + DEADLINE + 5)
            await asyncio.sleep(0.5)
        errors = [line for line in nginx.error_log.read_text().splitlines()
                  if "[error]" in line or "[crit]" in line or "[alert]" in line]
        return result, code, a.log_text(), "\n".join(errors), before


@pytest.mark.parametrize("layer", ["l4", "l7"])
@pytest.mark.parametrize("kind", ["serve", "run"])
async def test_drainsafe_replica_loses_nothing(kind: str, layer: str, tmp_path: Path,
                                               nginx: Nginx) -> None:
    result, code, log, proxy_errors, before = await drain_one_replica(kind, layer, tmp_path,
                                                                      nginx)
    assert result.failed == 0, result.summary()
    # Not even a retried error: the proxy never met a refused or reset connection.
    assert proxy_errors == ""
    assert result.truncated == 0, result.summary()
    assert result.marked == 0, result.summary()
    # Answers went on through the drain (how many depends on the machine's speed).
    assert result.ok > before + WARM_UP_ANSWERS, (before, result.summary())
    assert code == 0, f"drained replica exit code {code}\n{log}"
    # The drain was really exercised: requests still arrived after SIGTERM.
    assert '"phase":"exit"' in log and '"requests_after_drain":0,' not in \
        log.split('"phase":"exit"')[1].split("\n")[0], log


async def test_plain_uvicorn_loses_requests_behind_l4(tmp_path: Path, nginx: Nginx) -> None:
    result, _, _, proxy_errors, _ = await drain_one_replica("plain", "l4", tmp_path, nginx)
    assert result.ok > 0
    assert result.failed + result.truncated > 0, \
        f"plain uvicorn lost nothing; the harness may not see failures: {result.summary()}"
    assert proxy_errors


async def test_plain_uvicorn_behind_l7_needs_the_proxys_retries(tmp_path: Path,
                                                                 nginx: Nginx) -> None:
    # Behind an L7 proxy the refused connections of the propagation window are retried on
    # the other replica (proxy_next_upstream error), so clients see failures only when a
    # reused keep-alive connection races uvicorn's close: rare at this scale. What is
    # certain is that the proxy met errors from the replica; with drainsafe it meets none.
    result, _, _, proxy_errors, _ = await drain_one_replica("plain", "l7", tmp_path, nginx)
    assert result.ok > 0
    assert "Connection refused" in proxy_errors or result.failed > 0, \
        f"{result.summary()}\n{proxy_errors}"


def test_nginx_runner_starts_reloads_and_stops_only_its_own(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    with Nginx(tmp_path / "a") as a, Nginx(tmp_path / "b") as b:
        a.start(_config("l7", listen, ["127.0.0.1:9"], a.workdir))
        b.start(_config("l4", f"127.0.0.1:{free_port()}", ["127.0.0.1:9"], b.workdir))
        pid_b = b.pid
        a.reload(_config("l7", listen, ["127.0.0.1:10"], a.workdir))
        assert "127.0.0.1:10" in a.conf_path.read_text()
        a.stop()
        assert b.pid == pid_b
        assert subprocess.run(["kill", "-0", str(pid_b)], check=False).returncode == 0
    assert not (tmp_path / "a" / "error.log").read_text().count("[emerg]")
