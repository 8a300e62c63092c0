"""A lab that is killed (SIGKILL: no cleanup runs) takes its pods' processes with it, as a
node that dies takes its containers: nothing keeps running for a cluster that is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from drainsafe.lab.launcher import read_status, running_pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone, only not yet reaped by its new parent
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_sigkill_of_the_lab_ends_its_pods(tmp_path: Path) -> None:
    state = tmp_path / "lab"
    pidfile = tmp_path / "pod.pid"
    env = {**os.environ, "DRAINSAFE_LAB_DIR": str(state)}
    up = subprocess.run([sys.executable, "-m", "drainsafe", "lab", "up", "--nodes", "1",
                         "--no-ingress", "--detach"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stderr
    lab = running_pid(state)
    assert lab is not None
    try:
        status = read_status(state)
        assert status is not None
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
               "spec": {"containers": [{"name": "c", "image": "local", "command": [
                   "sh", "-c", f"echo $$$$ > {pidfile}; exec sleep 300"]}]}}  # $$ escapes $
        created = subprocess.run(["kubectl", f"--kubeconfig={status['kubeconfig']}", "apply",
                                  "-f", "-"], input=json.dumps(pod), capture_output=True,
                                 text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "the pod never started"
            time.sleep(0.1)
        pod_pid = int(pidfile.read_text())
        assert _alive(pod_pid)
    finally:
        os.kill(lab, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pod_pid):
        assert time.monotonic() < deadline, f"pod process {pod_pid} outlived its lab"
        time.sleep(0.05)
