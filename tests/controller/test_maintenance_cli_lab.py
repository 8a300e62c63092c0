"""`drainsafe maintenance` against the lab with the real controller (issue 30): create a
WhenMaintained maintenance from flags, follow it with `watch` in a subprocess, mark the node
with `done` once it awaits maintenance, and see watch exit 0 with the node uncordoned; the
`--dry-run` YAML applied by the real `kubectl apply -f` stores the same spec as `create`.
The node runs a Deployment's only replica, drained make before break: `kubectl get` shows
LOWEST 100%, `kubectl describe` (1.27 and 1.33) the node table, the conditions and the
Events of each step, and `delete --wait` follows the object until its finalizer is gone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import pty
import sys
from typing import Any

import pytest
import yaml

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, virtual_deployment
from drainsafe.maintenance.spec import parse_spec
from drainsafe.shell import EXIT_API, EXIT_OK, EXIT_USAGE

from .guardlab import KUBECTL_DIR, install, kubectl, lab_path_env, ready_pods, until

pytestmark = pytest.mark.e2e
PODS = BY_KEY["pods"]
NODES = BY_KEY["nodes"]
EVENTS = BY_KEY["events"]
NAME = "driver-upgrade"


async def cli(lab: Lab, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe.cli", "maintenance", *args,
        f"--kubeconfig={lab.kubeconfig}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(timeout):
        out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def _on_terminal(lab: Lab, *args: str) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdout; its exit code and what it drew."""
    control, terminal = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "drainsafe.cli", "maintenance", *args,
            f"--kubeconfig={lab.kubeconfig}", stdout=terminal, stderr=terminal,
            env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
        os.close(terminal)
        terminal = -1
        async with asyncio.timeout(60):
            await proc.wait()
        chunks = []
        os.set_blocking(control, False)
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(control, 65536):
                chunks.append(chunk)
    finally:
        os.close(control)
        if terminal >= 0:
            os.close(terminal)
    return int(proc.returncode or 0), b"".join(chunks).decode(errors="replace")


async def _get(lab: Lab, name: str) -> dict[str, Any]:
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", name, "-o", "yaml")
    assert code == 0, out
    return dict(yaml.safe_load(out))


@pytest.fixture
async def maintenance_lab(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if not (KUBECTL_DIR / "kubectl.1.33").exists():
        pytest.skip("kubectl 1.33 is not installed")
    monkeypatch.setenv("PATH", lab_path_env())
    async with Lab(tmp_path / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0.2,
                   restart_backoff=0.5) as lab:
        await install(lab, "--lease-seconds=4")
        await lab.wait_established("nodemaintenances.drainsafe.io")
        yield lab


async def test_create_watch_done_and_dry_run_match_kubectl_apply(
        maintenance_lab: Lab, tmp_path: pathlib.Path) -> None:
    lab = maintenance_lab
    assert lab.control_plane is not None
    store = lab.control_plane.store
    controllers = {p["spec"].get("nodeName") for p in store.items(PODS, "drainsafe-system")}
    node = sorted(n["metadata"]["name"] for n in store.items(NODES, "")
                  if n["metadata"]["name"] not in controllers)[0]

    # bad input: exit 2 naming the flag, nothing created
    code, _, err = await cli(lab, "create", "bad")
    assert code == EXIT_USAGE and "-l/--selector or --node" in err, err
    code, _, err = await cli(lab, "create", "bad", "--node", node, "--max-unavailable", "1.5")
    assert code == EXIT_USAGE and "--max-unavailable" in err, err
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", "bad")
    assert code != 0 and "NotFound" in out, out

    # --dry-run YAML through the real kubectl apply -f == the object create posts; over a
    # selector no node matches, so neither acts on the cluster
    flags = ("-l", "drainsafe-test=nobody,tier in (x,y)", "--max-parallel-nodes", "2",
             "--max-unavailable", "50%", "--uncordon", "Never", "--reason", "probe",
             "--strategy", "evict", "--capacity-floor", "25%")
    code, printed, err = await cli(lab, "create", "probe-applied", *flags, "--dry-run")
    assert code == EXIT_OK, err
    (tmp_path / "probe.yaml").write_text(printed)
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(tmp_path / "probe.yaml"))
    assert code == 0, out
    code, _, err = await cli(lab, "create", "probe-posted", *flags)
    assert code == EXIT_OK, err
    applied, posted = await _get(lab, "probe-applied"), await _get(lab, "probe-posted")
    assert applied["spec"] == posted["spec"]  # both after the server's defaulting
    assert parse_spec(applied) == parse_spec(yaml.safe_load(printed))
    assert applied["spec"]["nodeSelector"]["matchExpressions"][0]["values"] == ["x", "y"]
    assert applied["spec"]["capacityFloor"] == {"default": "25%"}  # a string, as intstr
    # --when-timeout the same way; a timeoutSeconds below 1 refused by the API server's
    # schema (kubectl apply) as by create (exit 2), each naming its field or flag
    when = ("-l", "drainsafe-test=nobody", "--uncordon", "WhenMaintained", "--when-rebooted")
    code, printed, err = await cli(lab, "create", "probe-timeout", *when, "--when-timeout",
                                   "900", "--dry-run")
    assert code == EXIT_OK, err
    (tmp_path / "timeout.yaml").write_text(printed)
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(tmp_path / "timeout.yaml"))
    assert code == 0, out
    applied = await _get(lab, "probe-timeout")
    assert applied["spec"]["maintainedWhen"] == {"annotation": True, "bootIDChanged": True,
                                                 "timeoutSeconds": 900}
    assert parse_spec(applied) == parse_spec(yaml.safe_load(printed))
    zero = yaml.safe_load(printed)
    zero["metadata"]["name"] = "probe-timeout-0"
    zero["spec"]["maintainedWhen"]["timeoutSeconds"] = 0
    (tmp_path / "zero.yaml").write_text(yaml.safe_dump(zero))
    code, out = await kubectl(lab, "1.33", "apply", "-f", str(tmp_path / "zero.yaml"))
    assert code != 0 and "spec.maintainedWhen.timeoutSeconds" in out, out
    code, _, err = await cli(lab, "create", "probe-timeout-0", *when, "--when-timeout", "0")
    assert code == EXIT_USAGE and "--when-timeout: maintainedWhen.timeoutSeconds" in err, err
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", "probe-timeout-0")
    assert code != 0 and "NotFound" in out, out
    # a second create of the same name is refused, not overwritten
    code, _, err = await cli(lab, "create", "probe-posted", "--node", node)
    assert code == EXIT_USAGE and "already exists" in err, err
    # pause / resume: a merge patch of spec.paused
    assert (await cli(lab, "pause", "probe-posted"))[0] == EXIT_OK
    assert (await _get(lab, "probe-posted"))["spec"]["paused"] is True
    assert (await cli(lab, "resume", "probe-posted"))[0] == EXIT_OK
    assert (await _get(lab, "probe-posted"))["spec"]["paused"] is False
    # done on a maintenance that does not wait for it: refused, no mark
    code, _, err = await cli(lab, "done", node, "--maintenance", "probe-posted")
    assert code == EXIT_USAGE and "refused" in err and "WhenMaintained" in err, err

    # a Deployment's only replica on the node (the other nodes cordoned meanwhile by the
    # real kubectl, so it lands there), to be drained make before break
    others = [n["metadata"]["name"] for n in store.items(NODES, "")
              if n["metadata"]["name"] != node]
    assert (await kubectl(lab, "1.33", "cordon", *others))[0] == 0
    await lab.apply(virtual_deployment("llm", replicas=1, startup_seconds=0.5,
                                       exit_after_sigterm_seconds=0.2))
    await lab.wait_available("default", "llm", timeout=60)
    assert (await kubectl(lab, "1.33", "uncordon", *others))[0] == 0
    first = ready_pods(lab, "llm")
    assert [p["spec"]["nodeName"] for p in first] == [node]

    # the real one, created paused so that `done` meets the node Pending for certain; watch
    # in a subprocess (a pipe: one line per change)
    code, _, err = await cli(lab, "create", NAME, "--node", node, "--paused",
                             "--uncordon", "WhenMaintained", "--reason", "driver 570")
    assert code == EXIT_OK, err
    watch = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe.cli", "maintenance", "watch", NAME,
        f"--kubeconfig={lab.kubeconfig}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert watch.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not any(ln.startswith(f"{NAME}: Paused") for ln in lines):
                line = (await watch.stdout.readline()).decode()
                assert line, f"watch ended early: {lines}"
                lines.append(line.rstrip("\n"))
        # too early: refused, and no mark that would later uncordon it unmaintained
        code, _, err = await cli(lab, "done", node, "--maintenance", NAME)
        assert code == EXIT_USAGE and "is Pending" in err, err
        assert "drainsafe.io/maintained" not in (
            store.get(NODES, "", node)["metadata"].get("annotations") or {})
        assert (await cli(lab, "resume", NAME))[0] == EXIT_OK
        async with asyncio.timeout(180):
            while not any(ln.startswith(f"  {node} AwaitingMaintenance") for ln in lines):
                line = (await watch.stdout.readline()).decode()
                assert line, f"watch ended early: {lines}"
                lines.append(line.rstrip("\n"))
        assert store.get(NODES, "", node)["spec"].get("unschedulable"), "not cordoned"
        code, out, err = await cli(lab, "done", node, "--maintenance", NAME)
        assert code == EXIT_OK, err
        async with asyncio.timeout(120):
            rest, watch_err = await watch.communicate()
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()
    lines += rest.decode().splitlines()
    assert watch.returncode == EXIT_OK, (lines, watch_err.decode())
    states = [ln.split()[1] for ln in lines if ln.startswith(f"  {node} ")]
    assert states[-2:] == ["AwaitingMaintenance", "Uncordoned"], lines
    assert any(ln.startswith(f"{NAME}: Succeeded done 1/1") for ln in lines), lines
    n = store.get(NODES, "", node)
    assert not n["spec"].get("unschedulable")
    # the name and the time of the mark: a value no early mark could have left
    assert n["metadata"]["annotations"]["drainsafe.io/maintained"].startswith(f"{NAME}/")
    assert f"drainsafe.io/maintained={NAME}/" in out, out
    code, out, err = await cli(lab, "status", NAME)
    assert code == EXIT_OK and node in out and "Uncordoned" in out, (out, err)
    # the replica moved make before break, and the operation saw it: 1/1 Ready throughout
    moved = ready_pods(lab, "llm")
    assert len(moved) == 1 and moved[0]["spec"]["nodeName"] != node, moved
    status = (await _get(lab, NAME))["status"]
    assert status["lowestCapacity"]["percent"] == "100%", status
    assert (status["lowestCapacity"]["workload"], status["lowestCapacity"]["ready"],
            status["lowestCapacity"]["desired"]) == ("Deployment/default/llm", 1, 1)
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", NAME)
    assert code == 0, out
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "DONE", "TOTAL", "WAVE", "LOWEST", "AGE"], out
    assert row.split()[:6] == [NAME, "Succeeded", "1", "1", "1", "100%"], out
    await _describe_shows_the_operation(lab, node)
    # on a terminal, watch draws the rich table instead of lines (finished: at once, 0)
    code, screen = await _on_terminal(lab, "watch", NAME)
    assert code == EXIT_OK, screen
    assert "STARTED" in screen and f"{node}" in screen and "Uncordoned" in screen, screen
    assert f"  {node} Uncordoned wave=" not in screen  # not the pipe's lines
    print("\n".join(lines))

    # delete --wait: the DELETE, then the leader removes its finalizer (nothing to give
    # back once Succeeded) and the object is gone
    code, out, err = await cli(lab, "delete", NAME, "--wait", "--timeout", "60")
    assert code == EXIT_OK, (out, err)
    assert out.splitlines()[0] == f"nodemaintenance.drainsafe.io/{NAME} deleted", out
    assert out.splitlines()[-1] == f"{NAME}: gone (finalizer removed)", out
    code, out = await kubectl(lab, "1.33", "get", "nodemaintenance", NAME)
    assert code != 0 and "NotFound" in out, out


STEPS = ["Paused", "Resumed", "NodeStarted", "NodeDrained", "NodeAwaitingMaintenance",
         "NodeUncordoned", "Succeeded"]


async def _describe_shows_the_operation(lab: Lab, node: str) -> None:
    """kubectl describe, old and new: the node table, the conditions and the Events, which
    it finds by involvedObject (name, empty namespace, kind, uid)."""
    assert lab.control_plane is not None
    store = lab.control_plane.store

    def reasons() -> list[str]:
        return [e["reason"] for e in sorted(
            (e for e in store.items(EVENTS, "default")
             if e["involvedObject"].get("kind") == "NodeMaintenance"
             and e["involvedObject"]["name"] == NAME), key=lambda e: e["metadata"]["name"])]

    # Events are written in the background after each status write: the last one may
    # still be on its way when watch exits
    await until(lambda: set(STEPS) <= set(reasons()), timeout=10,
                what=f"the Events {STEPS}")
    for version in ("1.27", "1.33"):
        code, out = await kubectl(lab, version, "describe", "nodemaintenance", NAME)
        assert code == 0, out
        text = out.splitlines()
        table = next(i for i, ln in enumerate(text) if ln.strip().startswith("NODE "))
        head, row = text[table].split(), text[table + 1].split()
        assert head[:6] == ["NODE", "STATE", "WAVE", "STARTED", "FINISHED", "REASON"], out
        assert row[:3] == [node, "Uncordoned", "1"] and row[5] == "Uncordoned", out
        assert text[table].index("STATE") == text[table + 1].index("Uncordoned"), out
        assert "Conditions:" in out and "AllNodesDone" in out, out
        events = text[next(i for i, ln in enumerate(text) if ln.startswith("Events:")):]
        shown = [ln.split()[1] for ln in events[3:] if ln.strip()]
        for reason in STEPS:
            assert reason in shown, (version, out)
        assert f"{node}: cordoned until marked maintained" in out, out
        print(f"kubectl {version} describe:\n{out}")


async def test_without_the_crd_create_exits_3_with_the_install_hint(
        tmp_path: pathlib.Path) -> None:
    async with Lab(tmp_path / "lab", nodes=1) as lab:
        code, _, err = await cli(lab, "create", "x", "--node", "node-1")
        assert code == EXIT_API and "kubectl apply -k deploy/controller" in err, err
        code, _, err = await cli(lab, "watch", "x")
        assert code == EXIT_API and "not served" in err, err
