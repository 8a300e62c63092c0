"""tune on the lab: a propagation lag that stream ends alone cannot sample, bounded from the
run the docs show, then the tuned settings under two rollouts and half of them as a control.

Issue 21 acceptance, scaled down: the lab's kube-proxy path learns endpoint changes 2.5 s
late; the pods serve 2 s keep-alive streams. With only the docs' load (`verify -c 8` of those
streams, watching the pods), a new routing decision happens only when a stream ends, so the
last request a pod got is a sample spaced by the stream length, not a bound. verify's probe
load (fresh connections, 20/s by default) gives tune a bound:
- measure: one `rollout restart` under generous settings (drain delay 6 s); verify reads the
  terminating pods' drainsafe figures through the pod proxy (no `kubectl logs`);
- tune's drain delay is >= 1.1x the real lag; with the probe off (a second verify of the same
  load, same rollout, --no-probe) tune still bounds it or exits 4 naming what to run;
- the tuned settings lose nothing over two rollouts (under one load); half the tuned drain
  delay loses requests.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Pod

from drainsafe.cli import main
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.verify.record import POD_TERMINATING, Record

pytestmark = pytest.mark.e2e

NAME = "llm"
PROPAGATION = 2.5
STREAM_BODY = '{"stream": true, "max_tokens": 20, "token_interval": 0.1}'
"""2 s streams: longer than the stream, the lag cannot be sampled from stream ends."""


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


async def start_verify(lab: Lab, out: Path, *extra: str) -> asyncio.subprocess.Process:
    """The docs' typical use: `drainsafe verify` of keep-alive streams watching the pods, as
    its own process, like a person or CI would run it. --metrics-port applies only while
    the pods declare no `drainsafe-admin` port."""
    url = lab.service_url("default", NAME)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe", "verify", f"{url}/v1/completions", "-m", "POST",
        "-d", STREAM_BODY, "-H", "content-type: application/json", "-c", "8",
        "--namespace", "default", "--selector", f"app={NAME}",
        "--kubeconfig", str(lab.kubeconfig), "--metrics-port", "http", *extra,
        "--duration", "300", "--timeout", "10", "--out", str(out), "--no-progress",
        "-o", "json", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def stop_verify(proc: asyncio.subprocess.Process) -> str:
    """SIGINT: verify stops sending, lets requests in flight finish, writes its record."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
    try:
        async with asyncio.timeout(90):
            _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return err.decode()


async def restart(lab: Lab) -> None:
    await lab.rollout_restart("default", NAME)


async def rollout_under_load(lab: Lab, *outs: tuple[Path, tuple[str, ...]],
                             rollouts: Sequence[Callable[[Lab], Awaitable[Any]]] = (restart,),
                             ) -> list[Record]:
    """Each of `rollouts` (a change that rolls the pods out), one after the other, each
    settled, under each verify of `outs` (all started, then stopped, together)."""
    procs = [await start_verify(lab, out, *extra) for out, extra in outs]
    try:
        await asyncio.sleep(6.0)  # loads running, watches synced, a rate window of probes
        for rollout in rollouts:
            old = await pod_names(lab)
            await rollout(lab)
            await settle(lab, old)
            await asyncio.sleep(0.5)
    finally:
        errors = "".join(await asyncio.gather(*(stop_verify(proc) for proc in procs)))
    for out, _ in outs:
        assert (out / "record.json").exists(), errors
    return [Record.read(out) for out, _ in outs]


def failures(record: Record) -> dict[str, int]:
    out: dict[str, int] = {}
    probe = record.probe_summary()
    for prefix, summary in (("", record.summary()), ("probe ", probe)):
        for label, n in (summary.counts.items() if summary else ()):
            if label != "ok":
                out[prefix + label] = out.get(prefix + label, 0) + n
    return out


def run_tune(capsys: pytest.CaptureFixture[str], directory: Path) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = main(["tune", "--from", str(directory), "--drain-via", "server", "-o", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else None, captured.err


async def test_bound_from_the_docs_load_holds_and_half_of_it_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started: set[int] = set()
    report: dict[str, Any] = {"real propagation": PROPAGATION}
    async with Lab(tmp_path / "lab", nodes=2, propagation_seconds=str(PROPAGATION),
                   ingress=False) as lab:
        try:
            assert lab.net is not None
            assert {round(c.delay, 3) for c in lab.net.consumers.values()} == {PROPAGATION}
            await lab.apply(deployment(6.0, 5.0, 15), SERVICE)
            await lab.wait_available("default", NAME, timeout=60)
            await lab.wait_backends("default", NAME, 2, timeout=30)

            measured, no_probe = await rollout_under_load(
                lab, (tmp_path / "measure", ()), (tmp_path / "no-probe", ("--no-probe",)))
            report["measure"] = failures(measured)
            assert report["measure"] == {} and failures(no_probe) == {}, report
            assert no_probe.probes == [] and len(measured.probes) > 100
            terminated = {e.pod for e in measured.events if e.kind == POD_TERMINATING}
            assert len(terminated) == 2
            # The servers' figures, read through the pod proxy while the pods terminated.
            assert {m.pod for m in measured.pod_metrics} == terminated, measured.pod_metrics
            assert all("drainsafe_last_request_after_drain_seconds" in m.text
                       for m in measured.pod_metrics)

            code, tuned, err = run_tune(capsys, tmp_path / "measure")
            assert code == 0, err
            report["tune"] = (tuned["measured"]["propagation_seconds"],
                              tuned["measured"]["propagation_basis"])
            assert tuned["measured"]["propagation_seconds"] >= PROPAGATION, report
            assert tuned["drain_delay_seconds"] >= 1.1 * PROPAGATION, report
            code, off, err = run_tune(capsys, tmp_path / "no-probe")
            report["tune without probe"] = (code, off["measured"]["propagation_seconds"]
                                            if off else err.splitlines()[:3])
            assert (code == 4 and "to bound it:" in err) or (
                code == 0 and off["drain_delay_seconds"] >= 1.1 * PROPAGATION), report

            delay, shutdown = tuned["drain_delay_seconds"], tuned["shutdown_deadline_seconds"]
            await apply_and_settle(lab, deployment(delay, shutdown,
                                                   tuned["termination_grace_period_seconds"]))
            half = round(delay / 2, 2)
            control = deployment(half, shutdown, math.ceil(half + shutdown + 5))
            # Two rollouts under one load, each ending two pods on the tuned settings: a
            # restart, then the change to half the drain delay (the control's pods).
            (record,) = await rollout_under_load(
                lab, (tmp_path / "tuned", ()), rollouts=(restart, lambda lab: lab.apply(control)))
            report["tuned"] = failures(record)
            assert record.summary().total > 40 and len(record.probes) > 200
            assert len({e.pod for e in record.events if e.kind == POD_TERMINATING}) == 4
            started.update(lab.pids())

            await lab.wait_backends("default", NAME, 2, timeout=30)
            (record,) = await rollout_under_load(lab, (tmp_path / "half", ()))
            report["half delay"] = (half, failures(record))
            started.update(lab.pids())
        finally:
            started.update(lab.pids())
    with capsys.disabled():
        print(report)  # measured vs real propagation, and the verdicts
    assert report["tuned"] == {}, report
    assert sum(report["half delay"][1].values()) > 0, report
    assert pids_alive(started) == []
