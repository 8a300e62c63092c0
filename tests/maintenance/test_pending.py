"""The pending taint (maintenance.pending) and the score that honours it
(placement.score, as kube-scheduler's TaintToleration score): plain objects."""

from __future__ import annotations

from drain.factory import node, pod
from drainsafe import placement
from drainsafe.maintenance.pending import PENDING_TAINT, pending_of, pending_taints

OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def test_on_while_pending_off_after_and_another_operations_taint_is_left_alone() -> None:
    bare = node("n1", taints=[OTHER])
    on = pending_taints(bare, "roll", pending=True)
    assert on == [OTHER, {"key": PENDING_TAINT, "value": "roll",
                          "effect": "PreferNoSchedule"}]
    tainted = node("n1", taints=on)
    assert pending_of(tainted) == "roll"
    assert pending_taints(tainted, "roll", pending=True) is None  # already so
    assert pending_taints(tainted, "roll", pending=False) == [OTHER]
    assert pending_taints(bare, "roll", pending=False) is None
    # another operation's: neither added twice nor removed by this one
    assert pending_taints(tainted, "other", pending=True) is None
    assert pending_taints(tainted, "other", pending=False) is None


def test_a_pod_prefers_a_node_without_an_untolerated_prefer_no_schedule_taint() -> None:
    soft = {"key": PENDING_TAINT, "value": "roll", "effect": "PreferNoSchedule"}
    # n1 would win on every other score (emptier, first by name); the taint decides
    nodes = [node("n1", gpus=4, taints=[soft]), node("n2", gpus=2)]
    new = pod("x", "", gpus=1)
    del new["spec"]["nodeName"]
    choice, verdicts = placement.choose(nodes, new, {})
    assert choice == "n2" and all(v.fits for v in verdicts.values())
    # a preference, not a filter: the only node left is still used
    assert placement.choose(nodes[:1], new, {})[0] == "n1"
    # a pod that tolerates it scores both alike again
    tolerant = pod("y", "", gpus=1, tolerations=[{"key": PENDING_TAINT,
                                                  "operator": "Exists"}])
    del tolerant["spec"]["nodeName"]
    assert placement.choose(nodes, tolerant, {})[0] == "n1"
