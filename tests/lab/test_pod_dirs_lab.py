"""A pod's directory is keyed by its UID, as the kubelet keys /var/lib/kubelet/pods/<UID>
(drainsafe.lab.node.volumes): a StatefulSet pod deleted and created again under the same
name starts with a fresh emptyDir and working directory, while its claim's volume keeps
what the predecessor wrote; the old directory stays while the old pod's process runs and
goes once it has exited. Real processes, the real control plane."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from conftest import wait_until
from drainsafe.kube.objects import is_ready, is_terminating
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.cluster import Lab, pids_alive
from drainsafe.lab.node.volumes import claim_dir, pod_dir

PODS = BY_KEY["pods"]

# Records what it finds at start, leaves a file in each volume and its working directory,
# and on SIGTERM says so and lingers a moment (the old pod's process outlives its delete).
PROGRAM = """
import json, os, signal, sys, time
uid = os.environ["POD_UID"]
seen = {d: sorted(os.listdir(d)) for d in ("scratch", "data", ".")}
for d in ("scratch", "data", "."):
    open(os.path.join(d, "from-" + uid), "w").write(uid)
open("seen.tmp", "w").write(json.dumps(seen))
os.rename("seen.tmp", "seen.json")
def stop(*_):
    open("sigterm", "w").close()
    time.sleep(1)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.1)
"""


def statefulset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "terminationGracePeriodSeconds": 10,
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{
                    "name": "c", "image": "python:3", "command": [sys.executable, "-c", PROGRAM],
                    "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.uid"}}}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                     {"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]}}


async def test_a_recreated_statefulset_pod_gets_a_fresh_empty_dir(tmp_path: Path) -> None:
    async with Lab(tmp_path / "lab", nodes=1, propagation_seconds=0, ingress=False) as lab:
        cp = lab.control_plane
        store = cp.store

        def web0() -> dict[str, Any] | None:
            return store.peek(PODS, "default", "web-0")

        def here(p: dict[str, Any]) -> Path:
            return pod_dir(lab.state_dir, "default", "web-0", p["metadata"]["uid"])

        def seen(p: dict[str, Any] | None) -> dict[str, list[str]] | None:
            path = here(p) / "c" / "seen.json" if p is not None else None
            return json.loads(path.read_text()) if path and path.exists() else None

        await lab.apply(statefulset())
        await wait_until(cp, lambda: is_ready(web0() or {}) and seen(web0()) is not None,
                         what="web-0 running")
        old = web0()
        assert old is not None
        old_uid, old_dir = old["metadata"]["uid"], here(old)
        assert seen(old) == {"scratch": [], "data": [], ".": ["data", "scratch"]}
        assert (old_dir / "volumes" / "kubernetes.io~empty-dir" / "scratch"
                / f"from-{old_uid}").exists()
        worker = lab.nodes.worker("default", "web-0")
        assert worker is not None and worker.containers[0].process is not None
        old_pid = int(worker.containers[0].process.pid or 0)

        assert lab.client is not None
        from lightkube.resources.core_v1 import Pod
        await lab.client.delete(Pod, "web-0", namespace="default")
        await wait_until(cp, lambda: (old_dir / "c" / "sigterm").exists(),
                         what="the old pod's process told to stop")
        # Terminating, its process still running: its directory is still there.
        assert is_terminating(web0() or {}) and pids_alive([old_pid]) == [old_pid]
        assert old_dir.exists()

        await wait_until(cp, lambda: (p := web0()) is not None
                         and p["metadata"]["uid"] != old_uid and seen(p) is not None,
                         what="web-0 created again and running")
        new = web0()
        assert new is not None
        # The same name, a new pod: nothing of the old one's but what its claim kept.
        assert seen(new) == {"scratch": [], "data": [f"from-{old_uid}"],
                             ".": ["data", "scratch"]}
        assert here(new) != old_dir
        assert (claim_dir(lab.state_dir, "default", "data-web-0") / f"from-{old_uid}").exists()
        # The old process exited (the new pod came only after), and its directory went.
        assert pids_alive([old_pid]) == []
        await wait_until(cp, lambda: not old_dir.exists(), what="the old directory removed")
