"""`drainsafe lab up --detach`, `status`, `down` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from drainsafe.lab.cluster import pids_alive

DRAINSAFE = [sys.executable, "-m", "drainsafe", "lab"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRAINSAFE, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_usage_errors_and_no_lab(tmp_path: Path) -> None:
    bad = run("up", "--nodes", "0", "--state-dir", str(tmp_path))
    assert bad.returncode == 2 and "--nodes 0" in bad.stderr
    bad = run("up", "--propagation-seconds", "soon", "--state-dir", str(tmp_path))
    assert bad.returncode == 2 and "propagation" in bad.stderr
    bad = run("up", "--feature-gates", "InPlacePodVerticalScaling=true", "--state-dir",
              str(tmp_path))
    assert bad.returncode == 2 and "unrecognized feature gate: InPlacePodVerticalScaling" \
        in bad.stderr
    bad = run("up", "--node-monitor-grace-seconds", "0", "--state-dir", str(tmp_path))
    assert bad.returncode == 2 and "--node-monitor-grace-seconds 0: must be > 0" in bad.stderr
    none = run("status", "--state-dir", str(tmp_path))
    assert none.returncode == 1 and "no lab running" in none.stderr
    assert run("down", "--state-dir", str(tmp_path)).returncode == 1


def test_up_detach_status_down(tmp_path: Path) -> None:
    state = tmp_path / "lab"
    pid = None
    try:
        up = run("up", "--detach", "--nodes", "2", "--gpus-per-node", "1",
                 "--propagation-seconds", "0.2", "--device-plugin", "--with-lws",
                 "--feature-gates", "MaxUnavailableStatefulSet=true", "--state-dir", str(state),
                 "--node-lease-seconds", "4")
        assert up.returncode == 0, up.stderr
        assert f"kubeconfig: {state / 'kubeconfig'}" in up.stdout
        pid = int((state / "lab.pid").read_text())
        kubectl = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "get",
                                  "nodes", "-o", "json"], capture_output=True, text=True,
                                 timeout=60, check=False)
        assert kubectl.returncode == 0, kubectl.stderr
        nodes = json.loads(kubectl.stdout)["items"]
        assert sorted(n["metadata"]["name"] for n in nodes) == ["node-0", "node-1"]
        assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "1" for n in nodes)
        # Each kubelet holds its node Lease, of the duration given.
        leases = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "get",
                                 "leases", "-n", "kube-node-lease", "-o", "json"],
                                capture_output=True, text=True, timeout=60, check=False)
        assert leases.returncode == 0, leases.stderr
        assert sorted((item["spec"]["holderIdentity"], item["spec"]["leaseDurationSeconds"])
                      for item in json.loads(leases.stdout)["items"]) == [
            ("node-0", 4), ("node-1", 4)]
        # The gate reached the detached lab: a v1.31 server would drop maxUnavailable.
        sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "db"}},
                        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}},
                        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                            "containers": [{"name": "c", "command": ["true"]}]}}}}
        created = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "create",
                                  "-f", "-", "-o", "json"], input=json.dumps(sts),
                                 capture_output=True, text=True, timeout=60, check=False)
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["spec"]["updateStrategy"]["rollingUpdate"][
            "maxUnavailable"] == 2

        # --with-lws installed the LeaderWorkerSet CRD before the lab reported itself up.
        lws = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "get", "lws"],
                             capture_output=True, text=True, timeout=60, check=False)
        assert lws.returncode == 0 and "No resources found" in lws.stderr, lws.stderr

        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline and ready != 2:
            ds = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "-n",
                                 "kube-system", "get", "daemonset", "-o", "json"],
                                capture_output=True, text=True, timeout=60, check=False)
            items = json.loads(ds.stdout)["items"] if ds.returncode == 0 else []
            ready = items[0]["status"].get("numberReady") if items else None
            time.sleep(0.2)
        assert ready == 2  # the GPU device-plugin DaemonSet runs on both GPU nodes

        status = run("status", "--state-dir", str(state), "--json")
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["pid"] == pid and len(data["nodes"]) == 2
        table = run("status", "--state-dir", str(state))
        assert table.returncode == 0 and "node-1" in table.stdout

        # A pod with a real process: `down` must stop it too.
        manifest = json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "command": [sys.executable, "-c",
                                                 "import time; time.sleep(600)"]}]}})
        created = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "create",
                                  "-f", "-"], input=manifest, capture_output=True, text=True,
                                 timeout=60, check=False)
        assert created.returncode == 0, created.stderr
        deadline = time.monotonic() + 60
        children: list[int] = []
        while time.monotonic() < deadline and not children:
            children = json.loads(run("status", "--state-dir", str(state), "--json").stdout
                                  ).get("pids", [])
            time.sleep(0.2)
        assert children and pids_alive(children) == children

        assert run("up", "--state-dir", str(state)).returncode == 1  # already running
        down = run("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stderr
        assert pids_alive([pid]) == []
        assert pids_alive(children) == []
        assert not (state / "lab.pid").exists()
    finally:
        if pid is not None and pids_alive([pid]):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)


def test_foreground_up_stops_on_ctrl_c(tmp_path: Path) -> None:
    state = tmp_path / "lab"
    proc = subprocess.Popen([*DRAINSAFE, "up", "--nodes", "1", "--no-ingress",
                             "--propagation-seconds", "0.5-2", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (state / "lab.pid").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "lab did not come up"
            time.sleep(0.1)
        status = json.loads(run("status", "--json", "--state-dir", str(state)).stdout)
        assert 0.5 <= status["paths"]["clusterip"] <= 2  # drawn from the range
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"kubeconfig: {state / 'kubeconfig'}" in out
        assert not (state / "lab.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
