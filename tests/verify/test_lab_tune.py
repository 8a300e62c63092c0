"""tune on the lab: measure a rollout, apply tune's settings, roll out again under verify.

Issue 6 acceptance, scaled down (propagation 1.5-2 s drawn at random per lab, 0.6 s streams):
- measure: a rollout of `drainsafe serve` pods with a generous drain delay, under verify's
  load, with verify watching the pods; the servers' phase logs say how long after the drain
  began requests still arrived (the propagation lag through the lab's kube-proxy path);
- tuned: tune's settings (drain delay, shutdown deadline, grace) give zero failed requests
  over repeated `rollout restart`s;
- 30 % shorter: the same settings scaled by 0.7 lose requests (the settings are tight).
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Pod

from drainsafe.cli import main
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.verify.record import POD_TERMINATING, Record
from drainsafe.verify.tune import Measurements, Tuning, from_log_lines, from_record, tune

pytestmark = pytest.mark.e2e

NAME = "llm"
PROPAGATION = "1.5-2.0"
"""Drawn at random per lab. Larger than the issue's 0.5-1 s: on a shared 2-core machine the
lab's timing jitters by ~0.2 s, which must stay small next to the 20 % margin (tuned) and the
16 % shortfall (30 % shorter) for either verdict to be certain."""
PING_RATE = 50
"""New connections per second: enough that the 30 % shorter drain delay's window (about a
sixth of the propagation delay, ~0.3 s) sees several of them at each terminating pod, few
enough not to slow the lab (its proxy and control plane share this test's event loop)."""
STREAM_BODY = '{"stream": true, "max_tokens": 6, "token_interval": 0.1}'


def deployment(drain_delay: float, shutdown: float, grace: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "drainsafe", "serve", "drainsafe.workload.streaming:app",
               "--host", "$(POD_IP)", "--port", "8000", "--no-access-log",
               "--admin-host", "$(POD_IP)", "--admin-port", "8490",
               "--drain-delay", f"{drain_delay:g}", "--shutdown-timeout", f"{shutdown:g}"]
    container = {
        "name": "server", "image": "drainsafe/workload", "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "DRAINSAFE_GRACE_SECONDS", "value": str(grace)}],
        # Readiness is on drainsafe serve's admin port, which no Service lists.
        "ports": [{"name": "http", "containerPort": 8000},
                  {"name": "drainsafe-admin", "containerPort": 8490}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "drainsafe-admin"},
                           "periodSeconds": 1, "failureThreshold": 1},
    }
    labels = {"app": NAME}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": grace,
                                           "containers": [container]}}}}


SERVICE = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": NAME, "namespace": "default"},
           "spec": {"selector": {"app": NAME},
                    "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


async def pod_names(lab: Lab) -> set[str]:
    assert lab.client is not None
    return {p.metadata.name async for p in lab.client.list(
        Pod, namespace="default", labels={"app": NAME}) if p.metadata and p.metadata.name}


async def settle(lab: Lab, old: set[str], timeout: float = 60) -> None:
    """Until the rollout is complete and every old pod is gone."""
    await lab.wait_available("default", NAME, timeout=timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await pod_names(lab) & old:
        assert loop.time() < deadline, f"old pods {old} still there after {timeout}s"
        await asyncio.sleep(0.1)


async def apply_and_settle(lab: Lab, manifest: dict[str, Any]) -> None:
    old = await pod_names(lab)
    await lab.apply(manifest)
    await settle(lab, old)
    await lab.wait_backends("default", NAME, 2, timeout=30)


async def start_verify(out: Path, *args: str) -> asyncio.subprocess.Process:
    """`drainsafe verify` as its own process, like a person or CI would run it, so its
    load does not compete with the lab's proxy for this test's event loop."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "verify", *args, "--duration", "300",
        "--timeout", "10", "--out", str(out), "--no-progress", "-o", "json",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def stop_verify(proc: asyncio.subprocess.Process) -> str:
    """SIGINT: verify stops sending, lets requests in flight finish, writes its record."""
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return err.decode()


async def rollout_under_load(lab: Lab, out: Path, *, lead: float = 1.0
                             ) -> tuple[Record, Record]:
    """verify's two loads through a `rollout restart`: 0.6 s streams (closed loop, watching
    the pods) and /ping on a new connection each (open loop: every request is routed afresh
    by the kube-proxy-like path, so arrival times at each pod are fine-grained)."""
    url = lab.service_url("default", NAME)
    streams = await start_verify(
        out / "streams", f"{url}/v1/completions", "-m", "POST", "-d", STREAM_BODY,
        "-H", "content-type: application/json", "-c", "6",
        "--namespace", "default", "--selector", f"app={NAME}",
        "--kubeconfig", str(lab.kubeconfig))
    pings = await start_verify(out / "pings", f"{url}/ping", "--rate", str(PING_RATE),
                               "--no-keepalive")
    errors = ""
    try:
        await asyncio.sleep(lead)  # both processes started, loads running, the watch synced
        old = await pod_names(lab)
        await lab.rollout_restart("default", NAME)
        await settle(lab, old)
        await asyncio.sleep(0.5)
    finally:
        for proc in (streams, pings):  # both stop now; then wait for their records
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
        errors += await stop_verify(streams)
        errors += await stop_verify(pings)
    assert (out / "streams" / "record.json").exists(), errors
    return Record.read(out / "streams"), Record.read(out / "pings")


def failures(*records: Record) -> dict[str, int]:
    out: dict[str, int] = {}
    for record in records:
        for label, n in record.summary().counts.items():
            if label != "ok":
                out[label] = out.get(label, 0) + n
    return out


def pod_logs(lab: Lab, streams: Record) -> list[Path]:
    """The logs of the pods that terminated during this run (what `kubectl logs` would
    show; the lab keeps container output under its state directory)."""
    terminated = sorted({e.pod for e in streams.events if e.kind == POD_TERMINATING})
    assert len(terminated) == 2, streams.events
    return [lab.state_dir / "pods" / f"default_{pod}" / "server.log" for pod in terminated]


def server_figures(lab: Lab, streams: Record) -> Measurements:
    found = Measurements()
    for log in pod_logs(lab, streams):
        found.merge(from_log_lines(log.read_text().splitlines(), str(log)))
    return found


def measure(lab: Lab, streams: Record, pings: Record) -> Measurements:
    found = from_record(streams, "streams")
    found.merge(from_record(pings, "pings"))
    found.merge(server_figures(lab, streams))
    return found


def lags(lab: Lab, streams: Record) -> list[float]:
    """Diagnostics only: what the terminated pods measured (empty if the watch missed them)."""
    try:
        return [round(s.value, 3) for s in server_figures(lab, streams).propagation]
    except (AssertionError, OSError):
        return []


def scaled(t: Tuning, factor: float) -> tuple[float, float, int]:
    delay = round(t.drain_delay_seconds * factor, 2)
    shutdown = round(t.shutdown_seconds * factor, 2)
    return delay, shutdown, max(math.ceil(t.grace_seconds * factor), 1)


async def test_tuned_settings_hold_and_30_percent_shorter_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started: set[int] = set()
    report: dict[str, Any] = {}
    async with Lab(tmp_path / "lab", nodes=2, propagation_seconds=PROPAGATION,
                   ingress=False) as lab:
        try:
            # Generous settings for the measurement: the drain delay far above propagation.
            await lab.apply(deployment(4.0, 5.0, 15), SERVICE)
            await lab.wait_available("default", NAME, timeout=60)
            await lab.wait_backends("default", NAME, 2, timeout=30)

            streams, pings = await rollout_under_load(lab, tmp_path / "measure", lead=2.0)
            report["measure"] = failures(streams, pings)
            report["propagation drawn"] = {k: round(c.delay, 3) for k, c in
                                           (lab.net.consumers.items() if lab.net else [])}
            assert report["measure"] == {}, report
            kinds = {e.kind for e in streams.events}
            assert {"terminating", "endpoint_not_ready", "exited", "deleted"} <= kinds, kinds
            server = server_figures(lab, streams)
            assert len(server.propagation) == 2 and not any(s.censored
                                                            for s in server.propagation)
            # The lab sets HOSTNAME to the pod name, so serve names the pod in each
            # response and verify's records give each terminating pod's last request too.
            terminated = {e.pod for e in streams.events if e.kind == POD_TERMINATING}
            assert terminated <= {r.pod for r in streams.requests}, streams.events
            found = measure(lab, streams, pings)
            assert len(found.propagation) >= 4, found.propagation
            tuning = tune(found, drain_via="server")
            report["tuning"] = (tuning.propagation.basis, tuning.max_request.basis,
                                tuning.applied.arithmetic())
            assert 1.5 <= tuning.drain_delay_seconds < 4.0, report
            # The command says the same, from verify's --out directories and the pod logs.
            argv = ["tune", "--from", str(tmp_path / "measure" / "streams"),
                    "--from", str(tmp_path / "measure" / "pings"), "--drain-via", "server",
                    "-o", "json"]
            for log in pod_logs(lab, streams):
                argv += ["--metrics", str(log)]
            capsys.readouterr()
            assert main(argv) == 0
            command = json.loads(capsys.readouterr().out)
            assert (command["drain_delay_seconds"], command["shutdown_deadline_seconds"],
                    command["termination_grace_period_seconds"]) == (
                tuning.drain_delay_seconds, tuning.shutdown_seconds, tuning.grace_seconds)

            tuned = (tuning.drain_delay_seconds, tuning.shutdown_seconds, tuning.grace_seconds)
            await apply_and_settle(lab, deployment(*tuned))
            for run in range(2):
                streams, pings = await rollout_under_load(lab, tmp_path / f"tuned{run}")
                report[f"tuned {run}"] = failures(streams, pings)
                report[f"tuned {run} lag"] = lags(lab, streams)
                assert streams.summary().total > 20 and pings.summary().total > 200
            started.update(lab.pids())

            await apply_and_settle(lab, deployment(*scaled(tuning, 0.7)))
            streams, pings = await rollout_under_load(lab, tmp_path / "shorter")
            report["30% shorter"] = failures(streams, pings)
            report["30% shorter lag"] = lags(lab, streams)
            started.update(lab.pids())
        finally:
            started.update(lab.pids())
    with capsys.disabled():
        print(report)  # the figures behind the verdicts, also when they hold
    assert report["tuned 0"] == {} and report["tuned 1"] == {}, report
    assert sum(report["30% shorter"].values()) > 0, report
    assert pids_alive(started) == []
