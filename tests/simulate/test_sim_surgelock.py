"""The drain engine's lock per workload (one surge of a workload at a time:
drainsafe.simulate.surgelock; a Deployment's under `upgrade.surge_sharing: lock`, the engine
before issue 30, a StatefulSet's or LeaderWorkerSet's always), a NodeMaintenance's planner
holding a node for a surge or room, and the backoff of a node deferred by drainsafe's
preflight (drainsafe.simulate.maintenance Waves.defer), on small scenarios with constant
times."""

from __future__ import annotations

from typing import Any

import numpy as np

from drainsafe.simulate.maintenance import Maintenance, Waves
from drainsafe.simulate.scenario import parse_scenario
from drainsafe.simulate.simulation import Result, simulate
from drainsafe.simulate.surgelock import SurgeLocks

STARTUP = 10.0
UPGRADE = 20.0


def fleet(strategy: str, *, nodes: int, gpus: int, workloads: list[dict[str, Any]],
          drain: list[int], parallel: int = 2, maintenance: bool = False,
          sharing: str | None = None) -> dict[str, Any]:
    upgrade: dict[str, Any] = {"strategy": strategy, "node_upgrade": UPGRADE, "start": 5,
                               "nodes": drain}
    if sharing is not None:
        upgrade["surge_sharing"] = sharing
    if maintenance:
        upgrade["maintenance"] = {"max_parallel_nodes": parallel}
    else:
        upgrade["parallelism"] = parallel
    return {
        "name": "lock", "seed": 4,
        "fleet": {"nodes": nodes, "gpus_per_node": gpus},
        "traffic": {"duration": 60},
        "consumers": [{"name": "kube-proxy", "share": 1.0, "propagation": 1.0}],
        "workloads": [{
            "rate": 10, "durations": {"p50": 1, "p99": 4, "max": 6}, "startup": STARTUP,
            "pdb": {"maxUnavailable": 1},
            "termination": {"grace": 30, "drain_delay": 0, "shutdown_deadline": 10},
            **w} for w in workloads],
        "upgrade": upgrade,
    }


def run(data: dict[str, Any]) -> Result:
    r = simulate(parse_scenario(data))
    assert r.finished, r.lifecycle.wedged
    return r


def shared(strategy: str, maintenance: bool = False) -> Result:
    """One Deployment, two pods on each of nodes 0 and 1 (first fit), both drained at once;
    nodes 2 and 3 free. drainsafe with the lock (its shared surge: test_sim_shared_surge)."""
    return run(fleet(strategy, nodes=4, gpus=2, drain=[0, 1], maintenance=maintenance,
                     workloads=[{"name": "llm", "replicas": 4, "gpus": 1}],
                     sharing="lock" if strategy == "drainsafe" else None))


def test_the_second_node_waits_for_the_first_nodes_surge_of_the_workload() -> None:
    locked = shared("drainsafe")
    lc = locked.lifecycle
    # Both drains start at once (one wave: both pass the preflight, neither surge recorded)
    assert lc.node_drain_started[0] == lc.node_drain_started[1] == 5.0
    assert lc.deferrals == 0
    # ... but node 1 surges only once node 0's old pods are gone: its new pods need a
    # start-up after that.
    assert lc.node_empty[1] >= lc.node_empty[0] + STARTUP
    # Node 0's two pods are evicted once its surge is Ready; node 1's only a surge later.
    deleted = np.sort(lc.deleted_at)
    assert deleted[1] == 5.0 + STARTUP
    assert deleted[2] >= lc.node_empty[0] + STARTUP
    # Per pod make before break (no lock) surges both nodes at once, and both empty together.
    per_pod = shared("surge")
    free = per_pod.lifecycle
    assert free.deleted_at.max() < 5.0 + 2 * STARTUP <= deleted[2]
    assert abs(free.node_empty[1] - free.node_empty[0]) < STARTUP


def test_a_node_maintenance_holds_the_second_node_uncordoned_until_that_surge_is_over(
        ) -> None:
    """The controller's planner does not start node 1 beside node 0, whose drain surges
    the same Deployment (WaitingForSurge): it stays Pending, uncordoned, and starts the
    moment node 0's surge is over (its old pods gone), long before node 0 is back; never
    started and deferred, never queued on the lock with a cordon."""
    lc = shared("drainsafe", maintenance=True).lifecycle
    assert lc.deferrals == 0
    assert lc.node_drain_started[0] == 5.0
    assert lc.node_drain_started[1] == lc.node_empty[0] < lc.node_back[0]
    # Its surge then starts at once: its pods are gone a start-up after its drain began.
    assert lc.node_empty[1] >= lc.node_drain_started[1] + STARTUP


def test_workloads_of_their_own_do_not_wait() -> None:
    """A pod each of two Deployments on nodes 0 and 1: the locks are per workload."""
    r = run(fleet("drainsafe", nodes=4, gpus=1, drain=[0, 1],
                  workloads=[{"name": "a", "replicas": 1, "gpus": 1},
                             {"name": "b", "replicas": 1, "gpus": 1}]))
    lc = r.lifecycle
    assert abs(lc.node_empty[1] - lc.node_empty[0]) < STARTUP


def short_of_room(maintenance: bool = True) -> Result:
    """Three one-GPU nodes: a Deployment's pod on node 0, another's on node 1, node 2
    free; nodes 0 and 1 start in one wave and there is room for one surge pod only."""
    return run(fleet("drainsafe", nodes=3, gpus=1, drain=[0, 1], maintenance=maintenance,
                     workloads=[{"name": "a", "replicas": 1, "gpus": 1},
                                {"name": "b", "replicas": 1, "gpus": 1}]))


def test_a_node_short_of_room_waits_uncordoned_for_it() -> None:
    """The controller's waves by room: node 1's surge pod does not fit beside node 0's,
    so it waits Pending, holding no slot (WaitingForRoom), never cordoned to be refused
    and deferred, and starts when node 0 is back with the room."""
    lc = short_of_room().lifecycle
    assert lc.deferrals == 0
    assert lc.node_drain_started[0] == 5.0
    assert lc.node_drain_started[1] == lc.node_back[0]
    assert lc.node_back[0] - 5.0 >= STARTUP + UPGRADE
    # A plain fleet drain cordons both: node 1's surge pod waits Pending for room.
    plain = short_of_room(maintenance=False).lifecycle
    assert plain.deferrals == 0
    assert plain.node_drain_started[1] == 5.0
    assert plain.pending_max >= 1


def test_the_backoff_doubles_from_the_controllers_2_s_to_its_60_s() -> None:
    waves = Waves(Maintenance(), order=[0, 1, 2], parallelism=2)
    assert waves.start(0.0) == [0, 1]
    retry = waves.defer(1, 10.0)
    assert retry == 12.0
    assert waves.back(0, 11.0) == [2]  # a fresh node goes first, the deferred one later
    assert waves.back(2, 11.5) == []  # alone now, but still in its backoff
    assert waves.start(12.0) == [1]
    assert [waves.defer(1, 20.0 + i) - (20.0 + i) for i in range(6)] == \
        [4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_the_lock_wakes_its_waiters_in_order_and_a_holder_since_now_owns_nothing_yet(
        ) -> None:
    locks = SurgeLocks()
    assert locks.acquire(0, node=5, now=1.0)
    assert locks.acquire(0, node=5, now=1.0)  # the same node's other pods
    assert not locks.acquire(0, node=7, now=1.0)
    assert not locks.acquire(0, node=6, now=2.0)
    assert not locks.owned_by_other(0, node=7, now=1.0)  # preflights of one wave
    assert locks.owned_by_other(0, node=7, now=2.0)
    assert locks.release(0, now=3.0) == 7
    assert locks.release(0, now=4.0) == 6
    assert locks.release(0, now=5.0) is None
    assert locks.acquire(0, node=9, now=6.0)


def test_a_group_step_holds_its_node_until_the_group_is_restored() -> None:
    """An LWS group of 2 on nodes 0 and 1 and a spare pair: draining node 0 moves the group
    (stand-in, evict, recreate, scale down); the node's maintenance starts only after the
    restore, as NodeDrainer.run returns only then."""
    r = run(fleet("drainsafe", nodes=6, gpus=1, drain=[0], parallel=1, workloads=[
        {"name": "lws", "replicas": 1, "group_size": 2, "gpus": 1,
         "pdb": {"maxUnavailable": 2}}]))
    lc = r.lifecycle
    spells = lc.groups
    restored = float(np.max(spells.serving_until[spells.standin]))
    assert lc.node_back[0] >= restored + UPGRADE
    assert lc.node_back[0] - lc.node_empty[0] >= STARTUP + UPGRADE
