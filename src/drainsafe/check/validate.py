"""Field values the rules rely on, checked before they are trusted.

A rule reads a field of the wrong type as unknown (see model.py), which keeps rules simple
but can turn bad input into a false clean result: `replicas: "two"` reads as an unknown
scale, and no PDB rule fires. So the fields the rules' arithmetic rests on are checked here,
and a bad value is an input error (exit 2) naming the file, line, object and field, never a
silent default.

What the API server accepts, from the Kubernetes API reference (v1.33): `replicas` is an
int32 >= 0 (DeploymentSpec, StatefulSetSpec, ReplicaSetSpec);
`terminationGracePeriodSeconds` is an int64 and "must be non-negative integer" (PodSpec);
`containers` and `initContainers` are lists of Container objects; an HPA's `minReplicas`
and `maxReplicas` are int32. drainsafe's own annotations hold a number of seconds: finite,
>= 0, at most MAX_SECONDS. A container's `resources.requests` and `resources.limits` map
resource names to quantities, each parsed and validated as the API server does
(drainsafe.quantity, which cites quantity.go and validation.go).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from drainsafe.check.context import MAX_REQUEST_ANNOTATION, MAX_SECONDS, SHUTDOWN_ANNOTATION
from drainsafe.check.findings import Path
from drainsafe.check.load import InputError
from drainsafe.check.locate import locate
from drainsafe.check.model import SCALED_KINDS, Hpa, Index, Subject, Workload, mapping
from drainsafe.quantity import resource_quantity_problem

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SECONDS_ANNOTATIONS = (MAX_REQUEST_ANNOTATION, SHUTDOWN_ANNOTATION)


def seconds_annotation(text: str) -> float | None:
    """A drainsafe.io seconds annotation's value ("90", "90s", "1.5"), or None when it is not
    a finite number in 0..MAX_SECONDS."""
    try:
        value = float(text.strip().removesuffix("s"))
    except ValueError:
        return None
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        return None
    return value


def field_errors(index: Index) -> list[InputError]:
    """Every field value the rules cannot use, as input errors naming where it is."""
    return [error for part in field_errors_by_kind(index) for error in part]


def field_errors_by_kind(index: Index) -> tuple[list[InputError], ...]:
    """field_errors' parts in its order: the workloads', the HPAs', the groups' (each in
    input order): the parts of a split input join into the whole's (check.parallel)."""
    errors: list[InputError] = []
    for w in index.workloads:
        problems = _workload(w)
        if problems:  # seldom: most inputs are well-typed
            errors.extend(_error(w, path, problem) for path, problem in problems)
    hpas: list[InputError] = []
    for hpa in index.hpas:
        hpas.extend(_error(hpa, path, problem) for path, problem in _hpa(hpa))
    groups: list[InputError] = []
    for g in index.groups:  # lws v0.10.0 pkg/webhooks/leaderworkerset_webhook.go: size >= 1
        lwt = mapping(mapping(g.obj.get("spec")).get("leaderWorkerTemplate"))
        problem = _integer(lwt.get("size"), 1, INT32_MAX)
        if problem:
            groups.append(_error(g, ("spec", "leaderWorkerTemplate", "size"), problem))
    return errors, hpas, groups


def _error(subject: Subject, path: Path, problem: str) -> InputError:
    doc = subject.doc
    where = ".".join(str(p) for p in path)
    return InputError(doc.file, locate(doc, path), f"{subject.ref}: {where}: {problem}")


def _integer(value: object, low: int, high: int) -> str | None:
    """Why value is not an integer in low..high (None: it is one, or it is unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, got {_shown(value)}"
    if not low <= value <= high:
        return f"must be between {low} and {high:,}, got {value}"
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _workload(w: Workload) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    spec = mapping(w.obj.get("spec"))
    if w.ref.kind in SCALED_KINDS and not w.embedded and w.role != "workers":
        problem = _integer(spec.get("replicas"), 0, INT32_MAX)
        if problem:
            problems.append((("spec", "replicas"), problem))
    for values, template in ((w.template_annotations, True), (w.annotations, False)):
        if not values:  # most workloads annotate nothing
            continue
        for key in SECONDS_ANNOTATIONS:
            text = values.get(key)
            if text is not None and seconds_annotation(text) is None:
                base = (*w.pod_path[:-1], "metadata") if template else ("metadata",)
                problems.append((
                    (*base, "annotations", key),
                    f"expected a number of seconds from 0 to {MAX_SECONDS:,.0f}, "
                    f"got {_shown(text)}"))
    pod = w.pod
    problem = _integer(pod.get("terminationGracePeriodSeconds"), 0, INT64_MAX)
    if problem:
        problems.append((w.grace_path, problem))
    for key in ("containers", "initContainers"):
        value = pod.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            problems.append(((*w.pod_path, key),
                             f"expected a list of containers, got {_shown(value)}"))
            continue
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                problems.append(((*w.pod_path, key, i),
                                 f"expected a container (a mapping), got {_shown(item)}"))
                continue
            resources = item.get("resources")
            if resources is not None:  # a path made only for a problem (seldom any)
                for path, problem in _resources(resources):
                    problems.append(((*w.pod_path, key, i, "resources", *path), problem))
    return problems


def _resources(resources: object) -> list[tuple[Path, str]]:
    """What the API server refuses in a container's requests and limits (paths relative to
    its resources)."""
    if not isinstance(resources, dict):
        return [((), f"expected a mapping (requests, limits), got {_shown(resources)}")]
    problems: list[tuple[Path, str]] = []
    for part in ("requests", "limits"):
        amounts = resources.get(part)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            problems.append(((part,), "expected a mapping of resource names to "
                             f"quantities, got {_shown(amounts)}"))
            continue
        for name, amount in amounts.items():
            problem = _quantity(str(name), amount)
            if problem:
                problems.append(((part, str(name)), problem))
    return problems


_QUANTITIES: dict[tuple[str, object, type], str | None] = {}


def _quantity(name: str, amount: object) -> str | None:
    """resource_quantity_problem, once per distinct (name, value): a fleet's containers
    repeat a few ("nvidia.com/gpu", 1), ("memory", "64Gi")."""
    if isinstance(amount, list | dict):
        return resource_quantity_problem(name, amount)
    key = (name, amount, type(amount))  # 1 and True and 1.0 hash alike
    found = _QUANTITIES.get(key, _QUANTITIES)
    if found is _QUANTITIES:
        found = resource_quantity_problem(name, amount)
        if len(_QUANTITIES) < 10_000:
            _QUANTITIES[key] = found
    return found  # type: ignore[return-value]


def _hpa(hpa: Hpa) -> Iterator[tuple[Path, str]]:
    spec = mapping(hpa.obj.get("spec"))
    for key in ("minReplicas", "maxReplicas"):
        problem = _integer(spec.get(key), 0, INT32_MAX)
        if problem:
            yield ("spec", key), problem
