"""A lab node's reboot or kubelet upgrade, as the API sees a real one.

What a real node shows when it reboots (kubernetes v1.33.0 pkg/kubelet/nodestatus/
setters.go): the kubelet stops posting status, so Ready goes False or Unknown (the node
lifecycle controller then taints it not-ready); the kubelet that starts after the boot
reports a new status.nodeInfo.bootID (MachineInfo: cadvisor's info.BootID, read from
/proc/sys/kernel/random/boot_id, a new random UUID each boot; google/cadvisor
machine/info.go) and records a NodeRebooted Warning event when it differs from the stored
one; its status.nodeInfo.kubeletVersion is its own (VersionInfo: version.Get()), so an
upgraded kubelet reports the new version; then Ready is True again.

A reboot ends every container on the node; the pods stay bound to it. While the node is
down the node lifecycle controller marks them not Ready (MarkPodsNotReady), and once it is
back the kubelet syncs each pod again: its sandbox is gone, so kuberuntime's
computePodActions (kuberuntime_manager.go; its rules the same in copies read before and
after v1.33) starts every container anew per restartPolicy (Always all, OnFailure those
that did not succeed, Never none, and the pod fails), each with restartCount + 1 and, as
lastState, what containerd reports for a container whose task did not survive the restart
(exit code 255, reason Unknown; its CRI restart.go).

The lab's kubelets are in the lab's process, so the request travels through the API, as
a person's would to a machine agent: `request` sets the annotation REBOOT on the Node
(value: the new kubelet version or "", and the seconds to stay down), the lab's node pool
watches Nodes and hands it to the node's kubelet (lab.node.kubelet.Kubelet.reboot), which
removes the annotation, SIGKILLs every container's process group (as at power loss: no
preStop, no grace; a graceful node shutdown is not emulated), posts Ready=False (reason
KubeletNotReady; on a cluster the node lifecycle controller decides this after its grace
period), stops heartbeating and writing pod status for the down time, then posts its
status with a new boot ID (a uuid4) and version, Ready=True, the NodeRebooted event, and
starts the containers again (PodWorker.power_loss, PodWorker.boot). A pod keeps its pod
IP (a real new sandbox usually gets another). `drainsafe lab node reboot` is `request`
then `wait_rebooted`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drainsafe.kube import KubeClient, api_path
from drainsafe.kube.objects import is_node_ready, meta

REBOOT = "lab.drainsafe.io/reboot"
DOWN_SECONDS = 0.5


@dataclass(frozen=True)
class RebootRequest:
    kubelet_version: str = ""  # "": the kubelet keeps its version
    down_seconds: float = DOWN_SECONDS

    def value(self) -> str:
        return json.dumps({"kubeletVersion": self.kubelet_version,
                           "downSeconds": self.down_seconds}, sort_keys=True)

    @staticmethod
    def parse(value: str) -> RebootRequest:
        """The annotation's value; anything unreadable is a plain reboot."""
        try:
            raw = json.loads(value)
        except ValueError:
            return RebootRequest()
        if not isinstance(raw, dict):
            return RebootRequest()
        try:
            down = max(0.0, float(raw.get("downSeconds", DOWN_SECONDS)))
        except (TypeError, ValueError):
            down = DOWN_SECONDS
        return RebootRequest(str(raw.get("kubeletVersion") or ""), down)


def requested(node: dict[str, Any]) -> RebootRequest | None:
    value = (meta(node).get("annotations") or {}).get(REBOOT)
    return None if value is None else RebootRequest.parse(value)


def boot_facts(node: dict[str, Any]) -> tuple[str, str]:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return str(info.get("bootID") or ""), str(info.get("kubeletVersion") or "")


async def request(client: KubeClient, node: str, req: RebootRequest) -> dict[str, Any]:
    """Ask the node's lab kubelet to reboot; the Node as it was before."""
    path = api_path("v1", "nodes", name=node)
    before = await client.get(path)
    await client.patch(path, {"metadata": {"annotations": {REBOOT: req.value()}}})
    return before


async def wait_rebooted(client: KubeClient, node: str, boot_id: str, *,
                        timeout: float) -> dict[str, Any]:
    """Until the node reports another boot ID and is Ready; the Node then."""
    from drainsafe.kube import Informer

    async with Informer(client, api_path("v1", "nodes"),
                        field_selector=f"metadata.name={node}") as nodes:
        def back(cache: Any) -> dict[str, Any]:
            obj = cache.get(node)
            if obj is not None and boot_facts(obj)[0] != boot_id and is_node_ready(obj):
                return dict(obj)
            return {}  # not yet

        return await nodes.wait_for(back, timeout=timeout, what=f"{node} rebooted and Ready")
