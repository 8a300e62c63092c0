"""The test-only node agent (cp_node_agent) keeps its nodes Ready past the node lifecycle
controller's grace period (drainsafe.lab.controllers.nodelifecycle) by renewing their
Leases in kube-node-lease as the lab kubelet does; a node that heartbeats neither way goes
Unknown. The grace period is scaled down through the `node_monitor` fixture (conftest)."""

from __future__ import annotations

import pytest

from conftest import node_lease_seconds, wait_until
from drainsafe.kube.objects import is_node_ready, rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.controllers.nodelifecycle import NodeMonitor
from drainsafe.lab.controlplane import ControlPlane

NODES = BY_KEY["nodes"]
LEASES = BY_KEY["coordination.k8s.io/leases"]
# Scaled down from 50 s; 2 s rather than less leaves the agent's renewals (every 0.4 s)
# room for a loop stall on a busy machine (the agent and the controller share the loop).
GRACE = NodeMonitor(grace_seconds=2.0)


@pytest.mark.parametrize("node_monitor", [GRACE])
async def test_agent_nodes_stay_ready_past_the_grace_period(
        control_plane: ControlPlane, cp_nodes: list[str]) -> None:
    store = control_plane.store
    left_ready: list[str] = []

    def seen(ev: Event) -> None:
        if ev.resource == NODES.key and ev.obj["metadata"]["name"] in cp_nodes \
                and not is_node_ready(ev.obj):
            left_ready.append(ev.obj["metadata"]["name"])

    unlisten = store.listen(seen)
    try:
        # A node registered after the agent's, Ready once and then silent: the controller
        # marks it Unknown one grace period after it saw it, so by then the agent's nodes,
        # seen earlier, would have gone Unknown too had their Leases not been renewed.
        store.create(NODES, {"metadata": {"name": "silent"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}]}})
        await wait_until(control_plane, lambda: not is_node_ready(
            store.get(NODES, "", "silent")), what="the silent node Unknown")
    finally:
        unlisten()
    assert left_ready == []
    assert all(is_node_ready(store.get(NODES, "", n)) for n in cp_nodes)
    for name in cp_nodes:  # each Lease as a kubelet's (pkg/kubelet/nodelease)
        lease = store.get(LEASES, "kube-node-lease", name)
        assert lease["spec"]["holderIdentity"] == name
        assert lease["spec"]["leaseDurationSeconds"] == max(
            1, round(node_lease_seconds(GRACE)))
        [owner] = lease["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Node", name, store.get(NODES, "", name)["metadata"]["uid"])
