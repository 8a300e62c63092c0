"""Failpoints: named places where a test stops the process dead, to SIGKILL it exactly there
(or makes it raise there, or only learns that it got there).

The NodeMaintenance reconciler and the drain engine write their progress (the operation's
status, the node's record, the workload's surge record) and act on the cluster in turns; a
process killed between a write and its action, or between an action and its write, leaves
the cluster in a state the next leader must continue from. A failpoint stops the process
at one such seam so that a test kills it there, and not only where a timer happens to land.

Inert unless the environment variable DRAINSAFE_FAILPOINTS names a directory: only tests
and the lab set it (deploy/ never does), and nothing reads it from the API or a listener.
A point is armed by an empty file of its name in that directory. The first process to
reach an armed point takes it (an atomic rename, so a second leader with the same
environment passes the point), writes its pid into NAME.hit for the test to wait on and
to kill, logs it, and stops: the whole process, synchronously, so nothing it would have
done after the point (another task's write, a Lease renewal) reaches the cluster, as
nothing does after a SIGKILL. As fail-rs's "pause" action (tikv/fail-rs: a failpoint
configured by the FAILPOINTS environment variable), but armed per point by a file so that
one process environment serves a sequence of cases.

The armed file's text picks the action, as fail-rs's actions do: empty or `pause` stops as
above; `panic` raises FailpointPanic there (fail-rs's "panic": check's worker processes fail
so, and the parent must say so); `print` only records the hit and goes on (fail-rs's
"print": a test learns which process got there, e.g. that check's workers ran).
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Literal, get_args

ENV = "DRAINSAFE_FAILPOINTS"

# Each point: what is written and what is not yet done when the process stops there.
Point = Literal[
    "maintenance.operation.selected",  # status: every node Pending; no wave planned yet
    "maintenance.wave.started",  # status: the wave's nodes Cordoned; not cordoned yet
    "maintenance.node.cordoned",  # node cordoned and recorded; status still Cordoned
    "maintenance.node.draining",  # status Draining; the drain not started
    "drain.surged",  # the surge recorded and scaled up; stand-ins starting, none evicted
    "drain.evicted",  # an eviction accepted; the scale not lowered, the node record not told
    "maintenance.node.drained",  # drain done (record drained); status still Draining
    "maintenance.node.awaiting",  # status AwaitingMaintenance written; not yet maintained
    "maintenance.node.uncordoning",  # status Drained/AwaitingMaintenance (and maintained);
    # the cordon not yet removed
    "maintenance.node.uncordoned",  # uncordoned, record removed; status not yet Uncordoned
    "maintenance.release.given-back",  # deleted: every node given back; the finalizer still on
    "check.worker.checked",  # a check worker's share checked; its findings not yet sent
]
POINTS: tuple[Point, ...] = get_args(Point)
Action = Literal["pause", "panic", "print"]
ACTIONS: tuple[Action, ...] = get_args(Action)


class FailpointPanic(RuntimeError):
    """Raised at a point armed with `panic`."""


def failpoint(point: Point) -> None:
    """Act as `point` is armed to (see the module docstring); nothing if it is not."""
    where = os.environ.get(ENV)
    if not where:
        return
    armed = pathlib.Path(where) / point
    taken = armed.with_name(f"{point}.taken")
    try:
        armed.rename(taken)  # atomic: one process takes it
    except FileNotFoundError:
        return
    action = taken.read_text().strip() or "pause"
    taken.write_text(str(os.getpid()))
    taken.rename(armed.with_name(f"{point}.hit"))  # complete before the test sees it
    # Imported only when a point is reached: check imports this module (parallel.py), and
    # logging was ~5 ms of its start-up.
    import logging

    log = logging.getLogger(__name__)
    if action == "print":
        log.info("failpoint %s reached (pid %d)", point, os.getpid())
        return
    if action == "panic":
        raise FailpointPanic(f"failpoint {point}")
    if action != "pause":  # a test's typo must not pass for a point never reached
        raise FailpointPanic(f"failpoint {point}: unknown action {action!r}; known: "
                             f"{', '.join(ACTIONS)}")
    log.warning("failpoint %s reached: stopping this process (pid %d) until it is killed",
                point, os.getpid())
    while True:  # the event loop with it: no task of this process runs again
        time.sleep(3600)
