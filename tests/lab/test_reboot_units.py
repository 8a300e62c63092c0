"""A lab node's reboot request (lab.node.reboot) and the status a rebooting kubelet posts."""

from __future__ import annotations

from drainsafe.kube.objects import is_node_ready
from drainsafe.lab.node.kubelet import NodeConfig, node_status
from drainsafe.lab.node.reboot import REBOOT, RebootRequest, boot_facts, requested


def test_the_request_round_trips_and_garbage_is_a_plain_reboot() -> None:
    req = RebootRequest("v1.33.1", 0.3)
    assert RebootRequest.parse(req.value()) == req
    assert RebootRequest.parse("now") == RebootRequest()
    assert RebootRequest.parse('{"downSeconds": -4}').down_seconds == 0.0
    assert requested({"metadata": {"annotations": {REBOOT: req.value()}}}) == req
    assert requested({"metadata": {}}) is None


def test_status_down_then_back_with_a_new_boot_and_version() -> None:
    config = NodeConfig("n", subnet=1)
    down = {"status": node_status(config, started="t0", boot_id="b1", ready=False,
                                  ready_since="t1")}
    assert not is_node_ready(down)
    ready = next(c for c in down["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["lastTransitionTime"]) == ("KubeletNotReady", "t1")
    up = {"status": node_status(config, started="t2", boot_id="b2",
                                kubelet_version="v1.33.1")}
    assert is_node_ready(up) and boot_facts(up) == ("b2", "v1.33.1")
