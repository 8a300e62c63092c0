"""placement.LoadLedger: node loads kept pod change by pod change equal a full re-sum
(NodeLoad.of over each node's bound pods) after any history of creates, binds, updates,
finishes, terminations and deletions, so the lab scheduler's decisions do not change."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe import placement

NODES = ["n0", "n1", "n2"]
UIDS = ["a", "b", "c", "d", "e"]


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3"}}}


@st.composite
def pods(draw: st.DrawFn, uid: str) -> dict[str, Any]:
    requests = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                    st.sampled_from(["0", "100m", "1", "1500m", "128Mi",
                                                     "1Gi"]), max_size=3))
    meta: dict[str, Any] = {"name": f"p-{uid}", "namespace": "ns", "uid": uid}
    owner = draw(st.sampled_from([None, "rs1", "rs2"]))
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": owner,
                                    "controller": True}]
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    on = draw(st.sampled_from([None, *NODES]))
    if on:
        spec["nodeName"] = on
    phase = draw(st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed"]))
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


# One step: a pod's new state, or None (deleted).
steps = st.lists(st.sampled_from(UIDS).flatmap(
    lambda uid: st.tuples(st.just(uid), st.none() | pods(uid))), max_size=40)


def resummed(state: dict[str, dict[str, Any]]) -> dict[str, placement.NodeLoad]:
    return {n: placement.NodeLoad.of(p for p in state.values() if p["spec"].get("nodeName") == n)
            for n in NODES}


def same(load: placement.NodeLoad) -> tuple[Any, ...]:
    """A load's figures; a resource summed back to zero is as good as one never asked."""
    return ({k: v for k, v in load.used.items() if v != Decimal(0)}, load.count,
            load.owners, load.nonzero, load.requested)


@settings(max_examples=300)
@given(steps, pods("new"))
def test_the_ledger_equals_a_full_resum_and_places_the_same(
        history: list[tuple[str, dict[str, Any] | None]], pending: dict[str, Any]) -> None:
    ledger = placement.LoadLedger()
    state: dict[str, dict[str, Any]] = {}
    empty = placement.NodeLoad({}, 0, {})
    for uid, pod in history:
        ledger.put(uid, pod)
        if pod is None:
            state.pop(uid, None)
        else:
            state[uid] = pod
        full = resummed(state)
        assert {n: same(ledger.loads.get(n, empty)) for n in NODES} == \
            {n: same(full[n]) for n in NODES}
    assert same_choice(ledger, state, pending)
    # Built at once from the same pods, as the scheduler does on its first pod event.
    assert {n: same(placement.LoadLedger.of(state.values()).loads.get(n, empty))
            for n in NODES} == {n: same(load) for n, load in resummed(state).items()}


def same_choice(ledger: placement.LoadLedger, state: dict[str, dict[str, Any]],
                pending: dict[str, Any]) -> bool:
    pending["spec"].pop("nodeName", None)
    nodes = [node(n) for n in NODES]
    return placement.choose(nodes, pending, loads=ledger.snapshot()) == \
        placement.choose(nodes, pending, loads=resummed(state))


def test_a_snapshot_is_a_copy_the_pass_can_add_to() -> None:
    bound = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
             "spec": {"nodeName": "n0", "containers": [
                 {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
             "status": {"phase": "Running"}}
    ledger = placement.LoadLedger.of([bound])
    copy = ledger.snapshot()
    copy["n0"].add({**bound, "metadata": {"name": "q", "uid": "v"}})
    assert (ledger.loads["n0"].count, copy["n0"].count) == (1, 2)
    assert ledger.loads["n0"].used == {"cpu": Decimal(1)}
