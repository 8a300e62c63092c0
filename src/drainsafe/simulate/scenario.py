"""The scenario: a fleet, its workloads and traffic, and how it is to be upgraded.

A scenario is plain YAML (format in docs/simulate.md). `parse_scenario` turns the loaded
mapping into frozen dataclasses and rejects anything it does not understand with a
ScenarioError that names the field path, e.g. `workloads[1].termination.grace`.
Reading files is the only I/O here (the scenario itself and, optionally, a verify record
holding measured request durations).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from drainsafe.budget import DEFAULT_BUFFER_SECONDS, DEFAULT_GRACE_SECONDS, Budget
from drainsafe.kube.objects import lws_policy_recreates_group
from drainsafe.pdb import BudgetSpecError, PdbSpec
from drainsafe.simulate.distributions import (
    Constant,
    Distribution,
    Histogram,
    LogNormal,
    Uniform,
)
from drainsafe.simulate.maintenance import Maintenance

Strategy = Literal["kubectl", "drainsafe", "surge"]
SurgeSharing = Literal["shared", "lock"]
SURGE_SHARINGS: tuple[SurgeSharing, ...] = ("shared", "lock")
"""upgrade.surge_sharing: how the drainsafe engine surges a Deployment for nodes drained
at once. shared: today's engine (drain.sharedsurge, issue 30); lock: the engine before it,
one node's surge of a workload at a time, kept as a what-if for comparison."""
REMOVED_UPGRADE_FIELDS = ("shared_surge", "shared_join_room")
"""What-ifs of a design no engine runs (a shared surge with the gate over pods off the
holders, joining with or without room): a scenario that sets one is refused by name."""
STRATEGIES: tuple[Strategy, ...] = ("kubectl", "drainsafe", "surge")
# A LeaderWorkerSet's restartPolicy values (kubernetes-sigs/lws v0.10.0
# api/leaderworkerset/v1/leaderworkerset_types.go; Default is the deprecated None).
RESTART_POLICIES = ("RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default")

KUBECTL_EVICTION_RETRY_SECONDS = 5.0
"""kubectl drain retries an eviction refused by a PodDisruptionBudget (429) every 5 s.
Source: kubernetes/kubectl pkg/cmd/drain/drain.go (EvictErrorRetryDelay: 5 * time.Second),
slept by pkg/drain/drain.go on IsTooManyRequests; see also shared research drain-anchors.md."""


MAX_NODES = 10_000
"""fleet.nodes: 10,000 nodes with 75,000 replicas simulate in ~7 s, ~100 MB (docs/simulate.md)."""
MAX_GPUS_PER_NODE = 64
MAX_PODS = 100_000
"""Replicas over all workloads."""
MAX_LIST = 1_000
"""Consumers, workloads, histogram edges: entries in one list."""
MAX_SECONDS = 30 * 86_400.0
"""Any duration, the traffic simulated included: 30 days."""
MAX_RATE = 1_000_000.0
"""Requests per second of one workload."""
MAX_CONCURRENCY = 1_000_000


class ScenarioError(ValueError):
    """A scenario field that is missing, malformed or inconsistent; `path` names it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or 'scenario'}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Consumer:
    """Something that routes traffic to pods and learns of endpoint removal on its own clock."""

    name: str
    share: float
    propagation: Distribution


@dataclass(frozen=True)
class Diurnal:
    """Rate multiplier 1 + amplitude * cos(2 pi (hour - peak_hour) / 24)."""

    amplitude: float
    peak_hour: float


@dataclass(frozen=True)
class Termination:
    grace: float = DEFAULT_GRACE_SECONDS
    drain_delay: float = 0.0
    shutdown_deadline: float = 25.0
    """math.inf: the server waits for every in-flight request (only SIGKILL cuts them)."""
    buffer: float = DEFAULT_BUFFER_SECONDS

    @property
    def budget(self) -> Budget:
        return Budget(grace=self.grace, drain_delay=self.drain_delay,
                      shutdown_deadline=self.shutdown_deadline, buffer=self.buffer)


@dataclass(frozen=True)
class Workload:
    name: str
    replicas: int
    gpus: int
    rate: float
    """Mean requests per second across all of the workload's pods."""
    durations: Distribution
    startup: Distribution
    """Replacement start-up: scheduling to Ready (image pull, model load)."""
    termination: Termination
    pdb: PdbSpec | None = None
    diurnal: Diurnal | None = None
    max_concurrency: int | None = None
    """Requests one pod (one group's leader) serves at once; beyond the pool's total,
    requests are rejected."""
    group_size: int = 1
    """Pods per replica. Above 1 the workload is grouped (a LeaderWorkerSet): each replica
    is a leader and group_size - 1 workers of `gpus` GPUs each, every pod on a node of its
    own; traffic goes to the leader; the replica serves only while every pod of it is
    Ready (drainsafe.simulate.groups)."""
    restart_policy: str = "RecreateGroupOnPodRestart"
    """The LWS's restartPolicy: RecreateGroupOnPodRestart (default) or
    RecreateGroupAfterStart lose the whole group with any pod; None (or the deprecated
    Default) only the pod, but for a leader, whose deletion takes its workers."""

    @property
    def pods(self) -> int:
        return self.replicas * self.group_size

    @property
    def recreates_group(self) -> bool:
        return lws_policy_recreates_group(self.restart_policy)


@dataclass(frozen=True)
class Upgrade:
    strategy: Strategy = "kubectl"
    parallelism: int = 1
    surge_nodes: int = 0
    surge_ready: Distribution = field(default_factory=lambda: Constant(0.0))
    node_upgrade: Distribution = field(default_factory=lambda: Constant(300.0))
    """From the node's last pod gone to the node back, upgraded and schedulable."""
    start: float = 0.0
    eviction_retry: float = KUBECTL_EVICTION_RETRY_SECONDS
    nodes: tuple[int, ...] | None = None
    """The nodes to drain, by index, in this order; None: every node, in node order."""
    maintenance: Maintenance | None = None
    """Run as a NodeMaintenance: nodes chosen by its wave planner (simulate.maintenance)."""
    surge_sharing: SurgeSharing = "shared"
    """drainsafe: shared, the nodes drained at once hold parts of a Deployment's surge, as
    the engine does (simulate.surgelock SharedSurges); lock, one node's surge at a time,
    as the engine did before issue 30. StatefulSets and LeaderWorkerSets keep the lock
    either way."""


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    workloads: tuple[Workload, ...]
    consumers: tuple[Consumer, ...]
    upgrade: Upgrade
    horizon: float
    """Seconds of traffic simulated (the run lasts longer if the upgrade does)."""
    start_hour: float = 0.0
    seed: int = 1

    def with_settings(
        self,
        *,
        drain_delay: float | None = None,
        grace: float | None = None,
        parallelism: int | None = None,
        surge_nodes: int | None = None,
        strategy: Strategy | None = None,
    ) -> Scenario:
        """A copy with the sweep's knobs changed; the deadline refits the grace period."""
        workloads = self.workloads
        if drain_delay is not None or grace is not None:
            workloads = tuple(_retime(w, drain_delay, grace) for w in workloads)
        upgrade = self.upgrade
        if parallelism is not None:
            upgrade = replace(upgrade, parallelism=parallelism)
        if surge_nodes is not None:
            upgrade = replace(upgrade, surge_nodes=surge_nodes)
        if strategy is not None:
            upgrade = replace(upgrade, strategy=strategy)
        return replace(self, workloads=workloads, upgrade=upgrade)


def _retime(w: Workload, drain_delay: float | None, grace: float | None) -> Workload:
    from drainsafe.budget import fit_deadline

    t = w.termination
    delay = t.drain_delay if drain_delay is None else drain_delay
    new_grace = t.grace if grace is None else grace
    deadline = fit_deadline(grace=new_grace, drain_delay=delay, buffer=t.buffer)
    return replace(w, termination=replace(t, drain_delay=delay, grace=new_grace,
                                          shutdown_deadline=deadline))


# ---------------------------------------------------------------- loading and validation

def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError("", f"cannot read {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = text_line(p, exc.start)
        raise ScenarioError("", f"{p}:{line}: not UTF-8 text") from exc
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise ScenarioError("", f"{p} is not valid YAML: {exc}") from exc
    return parse_scenario(data, base_dir=p.parent)


def text_line(path: Path, offset: int) -> int:
    """The 1-based line of byte `offset` in the file."""
    with path.open("rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def parse_scenario(data: object, *, base_dir: Path | None = None) -> Scenario:
    root = _Fields(data, "", base_dir or Path.cwd())
    name = root.text("name", default="scenario")
    fleet = root.sub("fleet")
    nodes = fleet.integer("nodes", minimum=1, maximum=MAX_NODES)
    gpus = fleet.integer("gpus_per_node", minimum=1, maximum=MAX_GPUS_PER_NODE)
    fleet.done()

    traffic = root.sub("traffic", optional=True)
    horizon = traffic.duration("duration", default=3600.0, minimum=1.0)
    start_hour = traffic.number("start_hour", default=0.0, minimum=0.0, maximum=24.0)
    traffic.done()

    consumers = tuple(_consumer(c) for c in root.items("consumers"))
    share_sum = sum(c.share for c in consumers)
    if not math.isclose(share_sum, 1.0, abs_tol=1e-6):
        raise ScenarioError("consumers", f"shares must add up to 1, they add up to {share_sum:g}")
    if len({c.name for c in consumers}) != len(consumers):
        raise ScenarioError("consumers", "consumer names must be unique")

    workloads = tuple(_workload(w, gpus, nodes) for w in root.items("workloads"))
    if len({w.name for w in workloads}) != len(workloads):
        raise ScenarioError("workloads", "workload names must be unique")
    pods = sum(w.pods for w in workloads)
    if pods > MAX_PODS:
        raise ScenarioError("workloads", f"{pods:,} pods (replicas x group_size) in all, "
                            f"above the limit of {MAX_PODS:,}")
    need = sum(w.pods * w.gpus for w in workloads)
    if need > nodes * gpus:
        raise ScenarioError(
            "workloads", f"the replicas need {need} GPUs but the fleet has {nodes * gpus} "
            f"({nodes} nodes x {gpus})")

    up = root.sub("upgrade", optional=True)
    strategy = up.choice("strategy", STRATEGIES, default="kubectl")
    parallelism, maintenance = _maintenance(up)
    upgrade = Upgrade(
        strategy=strategy,
        parallelism=parallelism,
        maintenance=maintenance,
        surge_nodes=up.integer("surge_nodes", default=0, minimum=0, maximum=MAX_NODES),
        surge_ready=up.distribution("surge_ready", default=Constant(0.0)),
        node_upgrade=up.distribution("node_upgrade", default=Constant(300.0)),
        start=up.duration("start", default=0.0, minimum=0.0),
        eviction_retry=up.duration("eviction_retry", default=KUBECTL_EVICTION_RETRY_SECONDS,
                                   minimum=0.1),
        nodes=_drain_order(up, nodes),
        surge_sharing=_surge_sharing(up, strategy),
    )
    up.done()
    seed = root.integer("seed", default=1, minimum=0)
    root.done()
    return Scenario(name=name, nodes=nodes, gpus_per_node=gpus, workloads=workloads,
                    consumers=consumers, upgrade=upgrade, horizon=horizon,
                    start_hour=start_hour, seed=seed)


def _maintenance(up: _Fields) -> tuple[int, Maintenance | None]:
    """upgrade.parallelism, or upgrade.maintenance's max_parallel_nodes and max_unavailable
    (a NodeMaintenance's maxParallelNodes and maxUnavailable)."""
    if not up.present("maintenance"):
        return up.integer("parallelism", default=1, minimum=1, maximum=MAX_NODES), None
    if up.has("parallelism"):
        raise ScenarioError(up.at("parallelism"), "give upgrade.maintenance."
                            "max_parallel_nodes or upgrade.parallelism, not both")
    m = up.sub("maintenance")
    parallel = m.integer("max_parallel_nodes", default=1, minimum=1, maximum=MAX_NODES)
    raw = m.raw().get("max_unavailable")
    m.allow("max_unavailable")
    m.done()
    if isinstance(raw, bool) or not isinstance(raw, int | str | None):
        raise ScenarioError(m.at("max_unavailable"),
                            f"expected a node count or a percent, got {_kind(raw)}")
    if raw is not None:
        try:
            Maintenance(raw).budget(100)
        except (BudgetSpecError, TypeError, ValueError) as exc:
            raise ScenarioError(m.at("max_unavailable"),
                                f"expected a node count or a percent, got {raw!r}: {exc}"
                                ) from exc
    return parallel, Maintenance(max_unavailable=raw)


def _surge_sharing(up: _Fields, strategy: Strategy) -> SurgeSharing:
    """upgrade.surge_sharing: only the drainsafe strategy surges per workload. The
    what-ifs it replaced are refused by name (they model no engine)."""
    for key in REMOVED_UPGRADE_FIELDS:
        if up.has(key):
            raise ScenarioError(up.at(key), "removed: the drainsafe engine shares a "
                                "Deployment's surge, joining on room, by default (the "
                                "simulator models it); upgrade.surge_sharing: lock is the "
                                "engine before")
    if up.has("surge_sharing") and strategy != "drainsafe":
        raise ScenarioError(up.at("surge_sharing"), "only the drainsafe strategy surges "
                            f"per workload (upgrade.strategy is {strategy})")
    return up.choice("surge_sharing", SURGE_SHARINGS, default="shared")


def _consumer(f: _Fields) -> Consumer:
    c = Consumer(
        name=f.text("name"),
        share=f.number("share", minimum=0.0, maximum=1.0),
        propagation=f.distribution("propagation"),
    )
    f.done()
    return c


def _drain_order(f: _Fields, nodes: int) -> tuple[int, ...] | None:
    """upgrade.nodes: node indices, each once (a partial upgrade, or a chosen order)."""
    if not f.present("nodes"):
        return None
    value = f.raw()["nodes"]
    path = f.at("nodes")
    if not isinstance(value, list) or not value:
        raise ScenarioError(path, f"expected a non-empty list of node indices, got "
                            f"{_kind(value)}")
    order: list[int] = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < nodes:
            raise ScenarioError(f"{path}[{i}]", f"expected a node index 0..{nodes - 1}, "
                                f"got {v!r}")
        if v in order:
            raise ScenarioError(f"{path}[{i}]", f"node {v} is listed twice")
        order.append(v)
    return tuple(order)


def _workload(f: _Fields, gpus_per_node: int, nodes: int) -> Workload:
    name = f.text("name")
    gpus = f.integer("gpus", default=1, minimum=0, maximum=MAX_GPUS_PER_NODE)
    if gpus > gpus_per_node:
        raise ScenarioError(f.at("gpus"), f"{gpus} GPUs per pod do not fit on a node of "
                            f"{gpus_per_node}")
    # Every pod of a group on a node of its own: a group wider than the fleet never fits.
    group_size = f.integer("group_size", default=1, minimum=1, maximum=MAX_NODES)
    if group_size > nodes:
        raise ScenarioError(f.at("group_size"), f"a group of {group_size} pods needs "
                            f"{group_size} nodes, the fleet has {nodes}")
    pdb: PdbSpec | None = None
    if f.present("pdb"):
        pdb_fields = f.sub("pdb")
        try:
            pdb = PdbSpec.from_manifest(pdb_fields.raw())
        except BudgetSpecError as exc:
            raise ScenarioError(pdb_fields.path, str(exc)) from exc
        pdb_fields.allow("minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy")
        pdb_fields.done()
    diurnal: Diurnal | None = None
    if f.present("diurnal"):
        d = f.sub("diurnal")
        diurnal = Diurnal(amplitude=d.number("amplitude", minimum=0.0, maximum=1.0),
                          peak_hour=d.number("peak_hour", default=14.0, minimum=0.0,
                                             maximum=24.0))
        d.done()
    t = f.sub("termination", optional=True)
    deadline_raw = t.raw().get("shutdown_deadline", 25.0)
    deadline = (math.inf if deadline_raw is None
                else t.duration("shutdown_deadline", default=25.0, minimum=0.0))
    t.allow("shutdown_deadline")
    termination = Termination(
        grace=t.duration("grace", default=DEFAULT_GRACE_SECONDS, minimum=0.0),
        drain_delay=t.duration("drain_delay", default=0.0, minimum=0.0),
        shutdown_deadline=deadline,
        buffer=t.duration("buffer", default=DEFAULT_BUFFER_SECONDS, minimum=0.0),
    )
    t.done()
    # Optional, and when given at least 1: 0 would reject every request, not lift the limit.
    concurrency = (f.integer("max_concurrency", minimum=1, maximum=MAX_CONCURRENCY)
                   if f.present("max_concurrency") else None)
    w = Workload(
        name=name,
        replicas=f.integer("replicas", minimum=1, maximum=MAX_PODS),
        gpus=gpus,
        rate=f.number("rate", minimum=0.0, maximum=MAX_RATE),
        durations=f.distribution("durations"),
        startup=f.distribution("startup", default=Constant(60.0)),
        termination=termination,
        pdb=pdb,
        diurnal=diurnal,
        max_concurrency=concurrency,
        group_size=group_size,
        restart_policy=f.choice("restart_policy", RESTART_POLICIES,
                                default="RecreateGroupOnPodRestart"),
    )
    f.done()
    return w


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_MISSING = object()
T = TypeVar("T")


class _Fields:
    """A mapping being read, with its path; every key read is marked, leftovers are errors."""

    def __init__(self, data: object, path: str, base_dir: Path) -> None:
        if not isinstance(data, Mapping):
            raise ScenarioError(path, f"expected a mapping, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.base_dir = base_dir
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def present(self, key: str) -> bool:
        """Whether an optional section is given (null counts as absent)."""
        self._seen.add(key)
        return self.data.get(key) is not None

    def raw(self) -> dict[str, Any]:
        return dict(self.data)

    def allow(self, *keys: str) -> None:
        self._seen.update(keys)

    def done(self) -> None:
        extra = sorted(str(k) for k in self.data if k not in self._seen)
        if extra:
            known = ", ".join(sorted(self._seen)) or "none"
            raise ScenarioError(self.at(extra[0]), f"unknown field (known here: {known})")

    def _get(self, key: str, default: object) -> object:
        self._seen.add(key)
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise ScenarioError(self.at(key), "required field is missing")
            return default
        return value

    def sub(self, key: str, *, optional: bool = False) -> _Fields:
        value = self._get(key, {} if optional else _MISSING)
        return _Fields(value, self.at(key), self.base_dir)

    def items(self, key: str) -> list[_Fields]:
        value = self._get(key, _MISSING)
        if not isinstance(value, Sequence) or isinstance(value, str) or not value:
            raise ScenarioError(self.at(key), f"expected a non-empty list, got {_kind(value)}")
        if len(value) > MAX_LIST:
            raise ScenarioError(self.at(key), f"{len(value):,} entries, above the limit of "
                                f"{MAX_LIST:,}")
        return [_Fields(item, f"{self.at(key)}[{i}]", self.base_dir)
                for i, item in enumerate(value)]

    def text(self, key: str, *, default: object = _MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise ScenarioError(self.at(key), f"expected a non-empty string, got {_kind(value)}")
        return value

    def choice(self, key: str, options: tuple[T, ...], *, default: object = _MISSING) -> T:
        value = self._get(key, default)
        for option in options:
            if value == option:
                return option
        raise ScenarioError(self.at(key), f"expected one of {', '.join(map(str, options))}, "
                            f"got {value!r}")

    def boolean(self, key: str, *, default: object = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ScenarioError(self.at(key), f"expected true or false, got {_kind(value)}")
        return value

    def integer(self, key: str, *, default: object = _MISSING, minimum: int | None = None,
                maximum: int | None = None) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(self.at(key), f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            raise ScenarioError(self.at(key), f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ScenarioError(self.at(key), f"must be <= {maximum:,} (the limit), got {value:,}")
        return value

    def number(self, key: str, *, default: object = _MISSING, minimum: float | None = None,
               maximum: float | None = None) -> float:
        value = self._get(key, default)
        return _check_number(self.at(key), value, minimum, maximum)

    def duration(self, key: str, *, default: object = _MISSING,
                 minimum: float | None = None) -> float:
        return _duration(self.at(key), self._get(key, default), minimum)

    def distribution(self, key: str, *, default: object = _MISSING) -> Distribution:
        value = self._get(key, default)
        path = self.at(key)
        if isinstance(value, Constant | Uniform | LogNormal | Histogram):
            return value
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            return Constant(_duration(path, value, 0.0))
        spec = _Fields(value, path, self.base_dir)
        forms: dict[str, Callable[[_Fields], Distribution]] = {
            "p50": _lognormal, "min": _uniform, "histogram": _histogram,
            "verify_record": _verify_record,
        }
        for marker, build in forms.items():
            if spec.has(marker):
                dist = build(spec)
                spec.done()
                return dist
        raise ScenarioError(path, "expected seconds, {p50, p99} (lognormal), {min, max} "
                            "(uniform), {histogram: {edges, counts}} or {verify_record: FILE}")


def _duration(path: str, value: object, minimum: float | None) -> float:
    """Seconds, or a string with a unit; at most MAX_SECONDS (numpy's samplers overflow on
    values like 1e300, and nothing a fleet does takes longer than a month)."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ScenarioError(path, f"expected seconds or a duration like '90s', "
                                f"'5m', '24h', got {value!r}")
        value = float(match.group(1)) * _UNIT[match.group(2)]
    return _check_number(path, value, minimum, MAX_SECONDS)


def _check_number(path: str, value: object, minimum: float | None,
                  maximum: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(path, f"expected a number, got {_kind(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ScenarioError(path, f"expected a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ScenarioError(path, f"must be >= {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ScenarioError(path, f"must be <= {maximum:,.10g}, got {number:g}")
    return number


def _lognormal(f: _Fields) -> Distribution:
    p50 = f.duration("p50", minimum=0.0)
    p99 = f.duration("p99")
    if p50 <= 0:
        raise ScenarioError(f.at("p50"), "must be > 0 for a lognormal")
    if p99 < p50:
        raise ScenarioError(f.at("p99"), f"must be >= p50 ({p50:g}), got {p99:g}")
    cap = f.duration("max", minimum=0.0) if f.has("max") else None
    f.allow("max")
    if cap is not None and cap < p50:
        raise ScenarioError(f.at("max"), f"must be >= p50 ({p50:g}), got {cap:g}")
    if p99 == p50:
        return Constant(p50)
    return LogNormal(p50=p50, p99=p99, cap=cap)


def _uniform(f: _Fields) -> Distribution:
    low = f.duration("min", minimum=0.0)
    high = f.duration("max", minimum=0.0)
    if high < low:
        raise ScenarioError(f.at("max"), f"must be >= min ({low:g}), got {high:g}")
    return Uniform(low, high) if high > low else Constant(low)


def _histogram(f: _Fields) -> Distribution:
    h = f.sub("histogram")
    edges = _number_list(h, "edges", MAX_SECONDS)
    counts = _number_list(h, "counts", 1e15)
    h.done()
    return _make_histogram(h.path, edges, counts)


def _make_histogram(path: str, edges: list[float], counts: list[float]) -> Histogram:
    if len(edges) != len(counts) + 1:
        raise ScenarioError(path, f"needs one more edge than counts, got {len(edges)} edges "
                            f"and {len(counts)} counts")
    if any(b <= a for a, b in itertools.pairwise(edges)) or edges[0] < 0:
        raise ScenarioError(path + ".edges", "must be >= 0 and strictly increasing")
    if any(c < 0 for c in counts) or sum(counts) <= 0:
        raise ScenarioError(path + ".counts", "must be >= 0 with a positive total")
    return Histogram(tuple(edges), tuple(counts))


def _number_list(f: _Fields, key: str, maximum: float) -> list[float]:
    value = f._get(key, _MISSING)
    if not isinstance(value, list) or not value:
        raise ScenarioError(f.at(key), f"expected a non-empty list of numbers, got {_kind(value)}")
    if len(value) > MAX_LIST + 1:
        raise ScenarioError(f.at(key), f"{len(value):,} entries, above the limit of {MAX_LIST:,}")
    return [_check_number(f"{f.at(key)}[{i}]", v, None, maximum) for i, v in enumerate(value)]


def _verify_record(f: _Fields) -> Distribution:
    rel = f.text("verify_record")
    path = (f.base_dir / rel) if not Path(rel).is_absolute() else Path(rel)
    try:
        durations = durations_from_verify_record(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(f.at("verify_record"), f"{path}: {exc}") from exc
    return histogram_of(durations)


def histogram_of(durations: Sequence[float], bins: int = 50) -> Histogram:
    """An empirical distribution from measured durations (seconds)."""
    if not durations:
        raise ValueError("no request durations to build a histogram from")
    import numpy as np

    counts, edges = np.histogram(list(durations), bins=bins)
    return Histogram(tuple(float(e) for e in edges), tuple(float(c) for c in counts))


def durations_from_verify_record(path: Path) -> list[float]:
    """Durations (seconds) of the successful requests in a `drainsafe verify` record.

    `path` is record.json or the --out directory holding it (drainsafe.verify.record).
    """
    from drainsafe.verify.record import Record

    record = Record.read(path)
    out = [r.total for r in record.requests if r.outcome.ok and r.total > 0]
    if not out:
        raise ValueError("the record holds no successful request to take durations from")
    return out


def _kind(value: object) -> str:
    if value is None or value is _MISSING:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)
