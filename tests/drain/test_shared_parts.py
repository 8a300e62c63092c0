"""A shared surge's record and rules (drain.parts, drain.ownership version 2): a version 1
record reads as one part, the scale is the recorded replicas plus every part's pods, the
last part out removes the record, and the gate never lets capacity go below desired."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.drain import ownership, parts
from drainsafe.drain.ownership import SurgePart, SurgeRecord


def obj(doc: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"annotations": {ownership.SURGE: json.dumps(doc)}}}


def test_a_version_1_record_reads_as_one_part() -> None:
    record = SurgeRecord.of(obj({"node": "g1", "replicas": 3, "by": "a", "at": "t",
                                 "pods": {"default/p1": "u1", "default/p2": "u2"}}))
    assert record is not None and not record.parts
    assert record.nodes == ("g1",)
    assert record.holders == {"g1": SurgePart("a", "t", {"default/p1": "u1",
                                                         "default/p2": "u2"})}
    assert parts.target(record) == 5


def test_version_2_round_trips_and_a_version_1_reader_sees_every_pod() -> None:
    start = SurgeRecord(node="g1", replicas=4, by="a", at="t0")
    record = parts.with_part(start, "g1", SurgePart("a", "t0", {"ns/p1": "u1"}))
    record = parts.with_part(record, "g2", SurgePart("b", "t1", {"ns/p2": "u2", "ns/p3": "u3"}))
    doc = json.loads(record.to_json())
    assert doc["version"] == 2 and doc["node"] == "g1" and doc["replicas"] == 4
    assert doc["pods"] == {"ns/p1": "u1", "ns/p2": "u2", "ns/p3": "u3"}  # version 1's view
    again = SurgeRecord.of(obj(doc))
    assert again == record
    assert again.nodes == ("g1", "g2") and parts.target(again) == 7


def test_an_unreadable_part_is_an_unreadable_record() -> None:
    try:
        SurgeRecord.of(obj({"node": "g1", "replicas": 1, "parts": {"g1": "x"}}))
    except ValueError as exc:
        assert ownership.SURGE in str(exc)
    else:
        raise AssertionError("read")


def test_the_last_part_out_removes_the_record() -> None:
    record = parts.with_part(SurgeRecord(node="g1", replicas=2), "g1",
                             SurgePart(pods={"ns/a": "1"}))
    record = parts.with_part(record, "g2", SurgePart(pods={"ns/b": "2"}))
    one = parts.without_pods(record, "g1", ["ns/a"])
    assert one is not None and one.nodes == ("g2",) and parts.target(one) == 3
    assert one.node == "g1"  # the identity stays while parts come and go
    assert parts.without_pods(one, "g2", ["ns/b"]) is None


def test_join_on_room_and_the_gate() -> None:
    assert parts.may_join(0, fits=False)  # alone: as a lone surge
    assert not parts.may_join(1, fits=False)
    assert parts.may_join(2, fits=True)
    assert parts.may_evict(5, 4, serving=True)
    assert not parts.may_evict(4, 4, serving=True)
    assert parts.may_evict(4, 4, serving=False)  # an unready old pod takes nothing


NODES = ["g0", "g1", "g2", "g3"]


@st.composite
def runs(draw: st.DrawFn) -> tuple[int, dict[str, int]]:
    """A base and each holder's old pods (its part), at most the base in all."""
    base = draw(st.integers(1, 8))
    names = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True))
    holding: dict[str, int] = {}
    for n in names:
        if sum(holding.values()) < base:
            holding[n] = draw(st.integers(1, base - sum(holding.values())))
    return base, holding


@settings(max_examples=300, deadline=None)
@given(runs(), st.data())
def test_any_interleaving_keeps_the_scale_the_sum_and_capacity_at_desired(
        run: tuple[int, dict[str, int]], data: st.DataObject) -> None:
    """Parts join; at every step either a new pod the scale asked for becomes Available or
    a holder asks the gate to evict its next old pod, in any order. The written scale is
    always base + every part's pods, Available never goes below base, the gate never
    wedges (a denied eviction always has a new pod still to come), and the record is gone
    with the last part."""
    base, holding = run
    record: SurgeRecord | None = SurgeRecord(node="g0", replicas=base)
    for n, k in holding.items():
        assert record is not None
        record = parts.with_part(record, n, SurgePart(pods={f"{n}/{i}": str(i)
                                                           for i in range(k)}))
        assert parts.target(record) == base + sum(holding[m] for m in record.nodes)
    old = sum(holding.values())
    elsewhere = base - old  # the workload's pods on no drained node
    left = dict(holding)
    new_ready = 0
    while record is not None:
        old_left = sum(left.values())
        available = elsewhere + old_left + new_ready
        assert available >= base
        # The ReplicaSet makes the scale's worth of active pods: so many new ones at most.
        can_start = parts.target(record) - elsewhere - old_left - new_ready
        assert can_start >= 0
        node = data.draw(st.sampled_from(sorted(n for n, k in left.items() if k)))
        if can_start and data.draw(st.booleans()):
            new_ready += 1
            continue
        if not parts.may_evict(available, base, serving=True):
            assert can_start > 0, "the gate waits for a pod that never comes: a wedge"
            new_ready += 1
            continue
        left[node] -= 1
        record = parts.without_pods(record, node, [f"{node}/{left[node]}"])
        if record is not None:
            assert parts.target(record) == base + sum(left.values())
    assert sum(left.values()) == 0 and elsewhere + new_ready >= base
