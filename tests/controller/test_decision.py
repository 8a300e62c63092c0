"""The guard's hold decision, table-tested as a pure function."""

from __future__ import annotations

import dataclasses

import pytest

from drainsafe.controller.decision import (
    Allow,
    AllowReason,
    Facts,
    Hold,
    PodFacts,
    Release,
    ReleaseReason,
    SurgeFacts,
    WorkloadFacts,
    decide,
)

POD = PodFacts("ml", "llm-a", "uid-a", opted_in=True, phase="Running", terminating=False,
               ready=True, owner_kind="Deployment")
TWO = WorkloadFacts("llm", replicas=2, available=2, mid_rollout=False)
BASE = Facts(POD, TWO, surge=None, room=True, held_for=None)
LIMIT = 600.0


def _with(facts: Facts = BASE, **changes: object) -> Facts:
    pod_changes = {k: v for k, v in changes.items() if k in PodFacts.__dataclass_fields__}
    other = {k: v for k, v in changes.items() if k not in pod_changes}
    return dataclasses.replace(facts, pod=dataclasses.replace(facts.pod, **pod_changes), **other)


@pytest.mark.parametrize(("facts", "reason"), [
    (_with(opted_in=False), AllowReason.NOT_OPTED_IN),
    (_with(phase="Succeeded"), AllowReason.FINISHED),
    (_with(phase="Failed"), AllowReason.FINISHED),
    (_with(terminating=True), AllowReason.TERMINATING),
    (_with(ready=False), AllowReason.NOT_READY),
    (_with(workload=WorkloadFacts("llm", 2, 3, False)), AllowReason.CAPACITY),
    (_with(workload=WorkloadFacts("llm", 3, 3, False),
           surge=SurgeFacts(2, frozenset({"ml/llm-a"}))), AllowReason.STAND_IN_READY),
    (_with(dry_run=True), AllowReason.DRY_RUN),
])
def test_allowed_at_once(facts: Facts, reason: AllowReason) -> None:
    assert decide(facts, hold_limit=LIMIT) == Allow(reason)


def test_a_ready_pod_at_desired_capacity_is_held_and_surged_by_one() -> None:
    verdict = decide(BASE, hold_limit=LIMIT)
    assert isinstance(verdict, Hold)
    assert verdict.surge_to == 3 and verdict.waiting_for == "stand-in"
    assert "ml/llm-a" in verdict.message and "scaled 2 -> 3" in verdict.message


def test_an_existing_record_is_reused_not_surged_again() -> None:
    # drainsafe drain already surged 2 -> 3 for this pod; the stand-in is not Available yet.
    facts = _with(workload=WorkloadFacts("llm", 3, 2, False),
                  surge=SurgeFacts(2, frozenset({"ml/llm-a"})))
    verdict = decide(facts, hold_limit=LIMIT)
    assert isinstance(verdict, Hold) and verdict.surge_to == 3


def test_a_second_pod_of_the_same_workload_adds_one_stand_in() -> None:
    # llm-b's stand-in is Available, but it is llm-b's: llm-a gets its own.
    facts = _with(workload=WorkloadFacts("llm", 3, 3, False),
                  surge=SurgeFacts(2, frozenset({"ml/llm-b"})))
    verdict = decide(facts, hold_limit=LIMIT)
    assert isinstance(verdict, Hold) and verdict.surge_to == 4
    facts = _with(workload=WorkloadFacts("llm", 4, 4, False),
                  surge=SurgeFacts(2, frozenset({"ml/llm-a", "ml/llm-b"})))
    assert decide(facts, hold_limit=LIMIT) == Allow(AllowReason.STAND_IN_READY)


def test_a_surge_by_drainsafe_drain_is_waited_for_never_added_to() -> None:
    # drainsafe drain surged 2 -> 3 for llm-b (another node); kubectl drain evicts llm-a.
    drain = SurgeFacts(2, frozenset({"ml/llm-b"}), owned=False)
    facts = _with(workload=WorkloadFacts("llm", 3, 3, False), surge=drain)
    verdict = decide(facts, hold_limit=LIMIT)
    assert isinstance(verdict, Hold) and verdict.surge_to is None
    assert verdict.waiting_for == "surge"
    # The drain's own eviction of the pod it surged for is never held.
    own = _with(facts, name="llm-b")
    assert decide(own, hold_limit=LIMIT) == Allow(AllowReason.DRAIN_SURGED)


@pytest.mark.parametrize(("facts", "waiting", "reason"), [
    (_with(room=False), "room", ReleaseReason.NO_ROOM),
    (_with(workload=WorkloadFacts("llm", 2, 2, True)), "rollout", ReleaseReason.MID_ROLLOUT),
    (BASE, "stand-in", ReleaseReason.TIMEOUT),
])
def test_held_then_released_after_the_limit(facts: Facts, waiting: str,
                                            reason: ReleaseReason) -> None:
    early = decide(dataclasses.replace(facts, held_for=LIMIT - 1), hold_limit=LIMIT)
    assert isinstance(early, Hold) and early.waiting_for == waiting
    if waiting != "stand-in":
        assert early.surge_to is None
    late = decide(dataclasses.replace(facts, held_for=LIMIT), hold_limit=LIMIT)
    assert isinstance(late, Release) and late.reason == reason


@pytest.mark.parametrize(("owner", "reason"), [
    ("StatefulSet", ReleaseReason.NO_CONTROLLER),  # its StatefulSet is not in the view
    ("ReplicaSet", ReleaseReason.NO_CONTROLLER),
    (None, ReleaseReason.NO_CONTROLLER),
])
def test_pods_a_stand_in_cannot_replace_are_released_at_once(
        owner: str | None, reason: ReleaseReason) -> None:
    verdict = decide(_with(owner_kind=owner, workload=None), hold_limit=LIMIT)
    assert isinstance(verdict, Release) and verdict.reason == reason


def test_a_build_without_a_surge_engine_never_holds_for_a_stand_in() -> None:
    verdict = decide(_with(can_surge=False), hold_limit=LIMIT)
    assert isinstance(verdict, Release) and verdict.reason == ReleaseReason.NO_ENGINE
    # Waiting for a surge drainsafe drain recorded still makes sense.
    drain = SurgeFacts(2, frozenset({"ml/llm-b"}), owned=False)
    facts = _with(workload=WorkloadFacts("llm", 3, 2, False), surge=drain, can_surge=False)
    assert isinstance(decide(facts, hold_limit=LIMIT), Hold)


STS_POD = dataclasses.replace(POD, name="llm-1", owner_kind="StatefulSet")
STS = WorkloadFacts("llm", replicas=2, available=2, mid_rollout=False, kind="StatefulSet")


@pytest.mark.parametrize(("facts", "expected"), [
    # At desired capacity: held, and a stand-in ordinal asked for (2 -> 3).
    (Facts(STS_POD, STS, None, room=True, held_for=None), "surge 3"),
    # Surged for this pod, the new ordinal (llm-2) not Available yet: still held, no
    # second surge.
    (Facts(STS_POD, dataclasses.replace(STS, replicas=3),
           SurgeFacts(2, frozenset({"ml/llm-1"})), room=True, held_for=5.0), "surge 3"),
    # The stand-in ordinal is Available: the eviction goes ahead.
    (Facts(STS_POD, dataclasses.replace(STS, replicas=3, available=3),
           SurgeFacts(2, frozenset({"ml/llm-1"})), room=True, held_for=9.0),
     AllowReason.STAND_IN_READY),
    # A pod of a StatefulSet surged by `drainsafe drain` for that very pod is not held.
    (Facts(STS_POD, dataclasses.replace(STS, replicas=3),
           SurgeFacts(2, frozenset({"ml/llm-1"}), owned=False), room=True, held_for=None),
     AllowReason.DRAIN_SURGED),
    # Mid rolling update: held without a surge, released after the limit.
    (Facts(STS_POD, dataclasses.replace(STS, mid_rollout=True), None, room=True,
           held_for=None), "rollout"),
    (Facts(STS_POD, dataclasses.replace(STS, mid_rollout=True), None, room=True,
           held_for=LIMIT), ReleaseReason.MID_ROLLOUT),
    # No room for a stand-in ordinal anywhere else.
    (Facts(STS_POD, STS, None, room=False, held_for=None), "room"),
    (Facts(STS_POD, STS, None, room=False, held_for=LIMIT), ReleaseReason.NO_ROOM),
    # Spare capacity already (a pod beyond desired is Available).
    (Facts(STS_POD, dataclasses.replace(STS, available=3), None, room=True, held_for=None),
     AllowReason.CAPACITY),
])
def test_a_statefulset_pod_is_held_until_a_stand_in_ordinal_is_available(
        facts: Facts, expected: object) -> None:
    verdict = decide(facts, hold_limit=LIMIT)
    if isinstance(expected, AllowReason):
        assert verdict == Allow(expected)
    elif isinstance(expected, ReleaseReason):
        assert isinstance(verdict, Release) and verdict.reason == expected
        assert "statefulset ml/llm" in verdict.message
    elif expected == "surge 3":
        assert isinstance(verdict, Hold) and verdict.surge_to == 3
        assert verdict.waiting_for == "stand-in" and "statefulset ml/llm" in verdict.message
    else:
        assert isinstance(verdict, Hold) and verdict.surge_to is None
        assert verdict.waiting_for == expected
