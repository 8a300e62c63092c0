"""The demo's runs: the seeds' failure modes side by side, same load, same lab, time-scaled.

The real thing, in seconds (the seeds' numbers: draining-a-gpu-node and
drain-connections-before-pod-termination): a 90 s generation against the default 30 s
grace; the recommended preStop sleep of 20 s with a grace of 150 s that covers hook and
longest request; proxies that catch up with an endpoint change in about 10 s (the seeds'
"typically 5 to 15 seconds"); a model that takes 60 s to load. The demo divides every
duration by `scale` (10: one second on screen is ten of the real thing), rounding grace
periods up, as terminationGracePeriodSeconds is a whole number of seconds.

1. `kubectl drain`, naive pods (plain uvicorn, no preStop, default grace, readiness on
   /health): the race refuses new connections, SIGKILL cuts the long generations, capacity
   drops while the replacement loads.
2. `kubectl drain`, the seeds' settings: no race and no SIGKILL, capacity still drops.
3. `drainsafe drain` (make before break) on drain-aware pods (`drainsafe serve`): nothing
   lost, never below the desired Ready count.
4. `kubectl drain` with the drainsafe controller installed (`kubectl apply -k
   deploy/controller`, drainsafe.demo.controller): the same as 3 with kubectl unchanged; run
   when the build has the controller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from drainsafe.demo import controller
from drainsafe.demo.measure import Expect
from drainsafe.demo.names import CONTROLLER, DRAINSAFE, NAIVE, SEEDS
from drainsafe.demo.scenario import ScenarioSettings, Tool
from drainsafe.kube.objects import DEFAULT_GRACE_SECONDS


@dataclass(frozen=True)
class RealTimes:
    """Durations of the real thing, seconds."""

    generation: float = 90.0  # a long generation (the seeds' p99)
    short: float = 5.0  # a short answer: most requests, many new connections
    default_grace: int = DEFAULT_GRACE_SECONDS  # what a pod without one gets
    seeds_grace: int = 150
    prestop_sleep: float = 20.0
    propagation: float = 10.0
    model_load: float = 60.0
    drain_delay: float = 20.0  # drainsafe serve: keeps accepting while proxies catch up
    warmup: float = 30.0  # load before the drain: generations are mid-way when it starts


@dataclass(frozen=True)
class Scale:
    factor: float = 10.0

    def __call__(self, seconds: float) -> float:
        return seconds / self.factor

    def grace(self, seconds: int) -> int:
        return max(math.ceil(seconds / self.factor), 1)


@dataclass(frozen=True)
class DemoRun:
    name: str
    tool: Tool
    settings: ScenarioSettings
    expect: Expect
    shows: str  # what the run is there to show, in a line
    unavailable: str = ""  # why it cannot run in this build ("" : it can)
    controller: bool = False  # install the drainsafe controller first (run 4)


def demo_runs(scale: Scale, real: RealTimes = RealTimes()) -> list[DemoRun]:
    long = scale(real.generation)
    base = ScenarioSettings(
        nodes=3, replicas=2, propagation=scale(real.propagation),
        stream_seconds=scale(real.short), concurrency=8,
        # 12 long generations, routed at random: all 12 missing the drained node's pod
        # (1 in 4096) would leave run 1 without a generation for SIGKILL to cut.
        long_seconds=long, long_concurrency=12, token_interval=min(0.1, scale(1.0)),
        model_load=scale(real.model_load), warmup=scale(real.warmup),
        wait_timeout=120 + 4 * long)
    naive = replace(base, drain_aware=False, grace=scale.grace(real.default_grace))
    seeds = replace(naive, grace=scale.grace(real.seeds_grace),
                    prestop_sleep=scale(real.prestop_sleep), readiness_gate=True)
    delay = scale(real.drain_delay)
    # drainsafe serve's deadline covers the longest generation with a margin; the grace
    # covers drain delay + deadline + drainsafe's 5 s buffer (drainsafe.budget).
    deadline = math.ceil(long * 1.1)
    ours = replace(base, drain_aware=True, drain_delay=delay, shutdown_timeout=deadline,
                   grace=math.ceil(delay + deadline + 5), strategy="surge")
    return [
        DemoRun(NAIVE, "kubectl", naive, "race_and_kills",
                "the race refuses new connections, SIGKILL cuts long generations, "
                "capacity drops"),
        DemoRun(SEEDS, "kubectl", seeds, "no_race_but_dip",
                "preStop + grace + readiness gating: no race, no SIGKILL; capacity drops"),
        DemoRun(DRAINSAFE, "drainsafe", ours, "nothing_lost",
                "make before break: nothing lost, full capacity throughout"),
        DemoRun(CONTROLLER, "kubectl", replace(ours, guarded=True), "nothing_lost",
                "kubectl unchanged, the controller holds evictions until a stand-in is Ready",
                unavailable=controller.missing(), controller=True),
    ]
