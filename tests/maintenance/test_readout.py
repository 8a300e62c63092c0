"""The readout of a NodeMaintenance (issue 30): the node table kubectl describe prints, the
conditions, the Events of a status change, and the lowest capacity kept in status."""

from __future__ import annotations

from typing import Any

from drainsafe.drain.capacity import CapacityReading
from drainsafe.maintenance.capacity import LowestCapacity, from_status, lowest
from drainsafe.maintenance.progress import NodeProgress, status_of
from drainsafe.maintenance.readout import (
    TABLE_COLUMNS,
    node_table,
    set_conditions,
    transition_events,
    with_readout,
)

MARK = "drainsafe.io/maintained=m"
T0, T1 = "2026-12-06T03:00:00Z", "2026-12-06T03:05:00Z"


def _status(*nodes: NodeProgress, paused: bool = False, wave: int = 1,
            uncordon: Any = "WhenMaintained") -> dict[str, Any]:
    return status_of(nodes, uncordon, paused, wave, 1)


def _events(old: dict[str, Any], new: dict[str, Any], uncordon: str = "WhenMaintained"
            ) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in
            transition_events(old, new, name="m", uncordon=uncordon, mark=MARK)]


def test_node_table_lines_up_and_says_what_each_node_waits_for() -> None:
    nodes = [NodeProgress("gpu-1", "AwaitingMaintenance", 1, "Drained", started=T0,
                          finished=T1),
             NodeProgress("gpu-10", "Pending", 0, "Deferred", "no room for a surge"),
             NodeProgress("gpu-2", "Pending")]
    lines = node_table(nodes, name="m", uncordon="WhenMaintained", mark=MARK)
    assert lines[0].split("  ")[0] == "NODE" and "WAITING FOR / DETAIL" in lines[0]
    # every column starts at the same offset on every line
    starts = [lines[0].index(c) for c in TABLE_COLUMNS]
    for line, node in zip(lines[1:], ("gpu-1", "gpu-10", "gpu-2"), strict=True):
        assert line.startswith(node)
        assert all(line[s - 2:s] == "  " and line[s] != " " for s in starts[1:]), line
    assert lines[1].endswith(f"the maintained mark: {MARK}")
    assert T0 in lines[1] and T1 in lines[1]
    assert lines[2].endswith("no room for a surge")
    assert "its wave" in lines[3] and lines[3].split()[2:5] == ["-", "-", "-"]


def test_conditions_keep_their_transition_time_until_the_status_flips() -> None:
    running = _status(NodeProgress("a", "Draining", 1, "Draining"), NodeProgress("b"))
    first = with_readout(running, name="m", uncordon="Immediately", mark=MARK, now=T0,
                         generation=1)
    by = {c["type"]: c for c in first["conditions"]}
    assert (by["Progressing"]["status"], by["Progressing"]["reason"]) == ("True",
                                                                            "NodesInProgress")
    assert by["Succeeded"]["status"] == by["Failed"]["status"] == "False"
    # the same status later: nothing changes (no write)
    again = with_readout({**running, "conditions": first["conditions"],
                          "nodeTable": first["nodeTable"]}, name="m",
                         uncordon="Immediately", mark=MARK, now=T1, generation=1)
    assert again == first
    done = {**_status(NodeProgress("a", "Uncordoned", 1, "Uncordoned"),
                      NodeProgress("b", "Uncordoned", 2, "Uncordoned"),
                      uncordon="Immediately"), "conditions": first["conditions"]}
    after = {c["type"]: c for c in with_readout(done, name="m", uncordon="Immediately",
                                                mark=MARK, now=T1,
                                                generation=1)["conditions"]}
    assert after["Succeeded"]["status"] == "True"
    assert after["Succeeded"]["lastTransitionTime"] == T1
    assert after["Failed"]["lastTransitionTime"] == T0  # still False: kept
    assert after["Progressing"]["reason"] == "Succeeded"


def test_an_invalid_spec_keeps_its_reason_in_the_conditions() -> None:
    written = {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True",
                                                  "reason": "InvalidSpec", "message": "x"}]}
    by = {c["type"]: c for c in with_readout(written, name="m", uncordon="Immediately",
                                             mark=MARK, now=T0, generation=2)["conditions"]}
    assert (by["Failed"]["reason"], by["Failed"]["message"]) == ("InvalidSpec", "x")
    assert by["Progressing"]["status"] == "False"
    # a Failed condition that was False (reason of the running phase) is not a cause
    earlier = set_conditions([], [{"type": "Failed", "status": "False",
                                   "reason": "NodesInProgress", "message": ""}],
                             now=T0, generation=1)
    failed = {**_status(NodeProgress("a", "Failed", 1, "DrainFailed", "timeout")),
              "conditions": earlier}
    by = {c["type"]: c for c in with_readout(failed, name="m", uncordon="Immediately",
                                             mark=MARK, now=T1, generation=1)["conditions"]}
    assert by["Failed"]["reason"] == "NodeFailed"


def test_events_of_each_transition_once() -> None:
    pending = _status(NodeProgress("a"), NodeProgress("b"))
    started = _status(NodeProgress("a", "Cordoned", 1, "Cordoning"), NodeProgress("b"))
    assert _events(pending, started) == [("Normal", "NodeStarted")]
    assert _events(started, started) == []  # the same status again: nothing
    draining = _status(NodeProgress("a", "Draining", 1, "Draining"), NodeProgress("b"))
    assert _events(started, draining) == []
    awaiting = _status(NodeProgress("a", "AwaitingMaintenance", 1, "Drained"),
                       NodeProgress("b", "Pending", 0, "Deferred", "no room"))
    assert _events(draining, awaiting) == [("Normal", "NodeDrained"),
                                           ("Normal", "NodeAwaitingMaintenance"),
                                           ("Normal", "NodeDeferred")]
    paused = _status(NodeProgress("a", "AwaitingMaintenance", 1, "Drained"),
                     NodeProgress("b", "Pending", 0, "Deferred", "no room"), paused=True)
    assert _events(awaiting, paused) == [("Normal", "Paused")]
    assert _events(paused, awaiting) == [("Normal", "Resumed")]
    done = _status(NodeProgress("a", "Uncordoned", 1, "Uncordoned"),
                   NodeProgress("b", "Failed", 2, "DrainFailed", "timed out"))
    assert _events(awaiting, done) == [("Normal", "NodeUncordoned"),
                                       ("Warning", "NodeFailed"), ("Warning", "Failed")]
    never = _status(NodeProgress("a", "Drained", 1, "Drained"), uncordon="Never")
    assert _events(_status(NodeProgress("a", "Draining", 1, "Draining"), uncordon="Never"),
                   never, "Never") == [("Normal", "NodeDrained"), ("Normal", "NodeLeftCordoned"),
                                       ("Normal", "Succeeded")]


def test_lowest_capacity_only_goes_down_and_warns_below_desired() -> None:
    full = LowestCapacity.of(CapacityReading("Deployment/default/llm", 3, 3), node="a", at=T0)
    surged = LowestCapacity.of(CapacityReading("Deployment/default/llm", 4, 3), node="a",
                               at=T1)
    assert surged.percent == 100 and lowest(full, surged) is full  # tie: the first stays
    short = LowestCapacity.of(CapacityReading("LeaderWorkerSet/default/g", 1, 2, "groups"),
                              node="b", at=T1)
    assert short.percent == 50 and lowest(full, short) is short
    assert lowest(short, full) is short and lowest(None, full) is full
    two_thirds = LowestCapacity(2, 3, "Deployment/default/llm")
    assert two_thirds.percent == 66  # rounded down: never 100 % below desired
    status = {"lowestCapacity": short.as_status()}
    assert from_status(status) == short and from_status({}) is None
    assert from_status({"lowestCapacity": {"ready": "x"}}) is None
    assert short.as_status()["percent"] == "50%"
    # a new lowest below desired gives one Warning; at 100 % none
    assert _events({}, {"lowestCapacity": full.as_status()}) == []
    assert _events({"lowestCapacity": full.as_status()}, status) == [
        ("Warning", "CapacityBelowDesired")]
    assert _events(status, status) == []
