"""verify's probe and the fresh/reused marking, against a real uvicorn; the metrics port lookup."""

from __future__ import annotations

import pytest

from drainsafe.cli import main
from drainsafe.verify.load import LoadSpec, run_load
from drainsafe.verify.podmetrics import drainsafe_lines, metrics_port
from drainsafe.verify.session import ProbeSpec
from verify.conftest import Target


async def test_keepalive_requests_are_reused_and_the_probe_is_all_fresh(target: Target
                                                                        ) -> None:
    user = LoadSpec(url=f"{target.url}/ok", duration=0.5, concurrency=2)
    run = await run_load(user)
    # One connection per worker: the first request of each opens it, the rest reuse it.
    assert sum(1 for r in run.results if r.fresh) == 2 < len(run.results)
    probe = ProbeSpec(rate=40, path="/status/404?x=1").load(user, duration=0.5)
    assert probe.url == f"{target.url}/status/404?x=1" and not probe.keepalive
    probed = await run_load(probe)
    assert len(probed.results) >= 15
    # Every probe opened a connection; a 404 shows a live server answered (below 500).
    assert all(r.fresh and r.outcome.ok and r.outcome.status == 404 for r in probed.results)
    failing = await run_load(ProbeSpec(rate=20, path="/status/503").load(user, duration=0.3))
    assert {r.outcome.label for r in failing.results} == {"http_503"}


def test_probe_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "http://127.0.0.1:9/", "--probe-rate", "-1"]) == 2
    assert "probe rate" in capsys.readouterr().err
    assert main(["verify", "http://127.0.0.1:9/", "--probe-path", "ping"]) == 2
    assert "must start with /" in capsys.readouterr().err


def pod(*ports: tuple[str, int]) -> dict[str, object]:
    return {"spec": {"containers": [
        {"name": "c", "ports": [{"name": n, "containerPort": p} for n, p in ports]}]}}


def test_the_admin_port_wins_then_the_named_port() -> None:
    assert metrics_port(pod(("http", 8000), ("drainsafe-admin", 8490)), "http") == 8490
    assert metrics_port(pod(("http", 8000)), "http") == 8000
    assert metrics_port(pod(("http", 8000)), "9100") == 9100
    assert metrics_port(pod(("http", 8000)), "metrics") is None
    assert metrics_port(pod(("http", 8000)), None) is None
    text = "# TYPE drainsafe_phase gauge\ndrainsafe_phase 1\nother_metric 2\n"
    assert drainsafe_lines(text) == "# TYPE drainsafe_phase gauge\ndrainsafe_phase 1\n"
