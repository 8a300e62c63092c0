"""The objects check reasons about, indexed across the whole input.

Rules see plain data plus this index: workloads (anything with a pod template), PDBs,
Services and HPAs, grouped by namespace so that "which PDBs select this workload's pods"
is a lookup, not a scan. Fields of the wrong type (e.g. an unrendered template value)
read as unknown rather than crash a rule.

A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, kubernetes-sigs/lws v0.10.0,
api/leaderworkerset/v1/leaderworkerset_types.go) is read as its two pod templates: the
leader's (spec.leaderWorkerTemplate.leaderTemplate; when unset, lws makes leaders from the
workerTemplate, pkg/controllers/leaderworkerset_controller.go) with spec.replicas pods (one
per group, default 1), and the workers' (workerTemplate) with replicas x (size - 1) pods
(size default 1). Their scales add up to replicas x size, which is what the disruption
controller counts for a PDB over the group's pods: leaders are owned by the leader
StatefulSet, workers by one worker StatefulSet per group, both with a scale. lws labels every
pod leaderworkerset.sigs.k8s.io/name=<lws name> (SetNameLabelKey). restartPolicy defaults to
RecreateGroupOnPodRestart (kubebuilder default), and RecreateGroupAfterStart also recreates
the whole group; None and the deprecated Default restart the failed pod only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload

from drainsafe.budget import DEFAULT_GRACE_SECONDS
from drainsafe.check.context import IGNORE_ANNOTATION
from drainsafe.check.findings import ObjectRef, Path
from drainsafe.check.load import Document
from drainsafe.check.servers import CommandLine, command_line
from drainsafe.kube import objects
from drainsafe.labels import Selector, SelectorError, from_label_selector
from drainsafe.pdb import BudgetSpecError, PdbSpec, best_case_disruptions

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
GROUP_KIND = "LeaderWorkerSet"
SCALED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", GROUP_KIND)
CHECKED_KINDS = (*WORKLOAD_KINDS, GROUP_KIND, "Pod", "PodDisruptionBudget", "Service",
                 "HorizontalPodAutoscaler")
LWS_NAME_LABEL = objects.LWS_NAME_LABEL
"""SetNameLabelKey: lws puts it on every pod of the set (one home: kube.objects)."""
RECREATE_GROUP_POLICIES = objects.LWS_RECREATE_GROUP_POLICIES
"""restartPolicy values under which one pod's deletion or eviction recreates its whole group."""
DEFAULT_RESTART_POLICY = "RecreateGroupOnPodRestart"
Role = Literal["leader", "workers"]
DEFAULT_NAMESPACE = "default"
MAX_EMBEDDED_DEPTH = 8


_T = TypeVar("_T")


class once(Generic[_T]):  # lower case: a decorator, like cached_property
    """functools.cached_property without its lock: Python 3.11 takes a lock on each first
    access (3.12 dropped it), which the index pays some 20,000 times per 10,000 objects.
    An index is built and read by one thread."""

    def __init__(self, compute: Callable[[Any], _T]) -> None:
        self.compute = compute
        self.name = ""
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        # The attribute's name, as cached_property takes it: a method compiled by mypyc
        # has no __name__.
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> once[_T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> _T | once[_T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.compute(obj)
        return value


def mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def sequence(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return None


def number(value: object) -> float | None:
    """A finite number, or None: "inf", "nan" and "1e400" (infinite as a float) are unknown,
    never arithmetic (validate.py reports them as input errors)."""
    # Most values are unset or plain ints (rules ask for every workload's fields).
    if value is None:
        return None
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            return None
    if isinstance(value, bool):
        return None
    found: float | None = None
    if isinstance(value, int | float):
        try:
            found = float(value)
        except OverflowError:  # an int too large for a float
            return None
    elif isinstance(value, str):
        try:
            found = float(value.strip().removesuffix("s"))
        except ValueError:
            return None
    return found if found is not None and math.isfinite(found) else None


def string_map(value: object) -> dict[str, str]:
    if type(value) is not dict:
        return {}
    for k, v in value.items():
        if type(k) is not str or type(v) is not str:
            return {str(k): str(v) for k, v in value.items()}
    return value


@dataclass
class Subject:
    """One object (or a pod template inside one) that findings are about."""

    doc: Document
    ref: ObjectRef

    @property
    def obj(self) -> dict[str, Any]:
        return self.doc.obj

    @once
    def annotations(self) -> dict[str, str]:
        return string_map(mapping(self.obj.get("metadata")).get("annotations"))

    @once
    def ignored(self) -> frozenset[str]:
        return _ignores(self.annotations)


def _ignores(annotations: Mapping[str, str]) -> frozenset[str]:
    text = annotations.get(IGNORE_ANNOTATION, "")
    return frozenset(r.strip() for r in text.split(",") if r.strip())


@dataclass
class Container:
    index: int
    spec: dict[str, Any]
    path: Path
    """Path of the container from the document root."""
    name: str = field(init=False)
    image: str = field(init=False)

    def __post_init__(self) -> None:
        # Read by most rules' messages and fixes, several times a container (~6 reads each):
        # set once, a read is an attribute's, where a property was a call per read.
        self.name = str(self.spec.get("name") or f"#{self.index}")
        self.image = str(self.spec.get("image") or "")

    @once
    def command_line(self) -> CommandLine | None:
        """command + args as the kubelet runs them (several rules read it)."""
        return command_line(self.spec.get("command"), self.spec.get("args"), self.image)


@dataclass
class Workload(Subject):
    pod_path: Path = ()
    """Path of the pod spec inside the object."""
    pod: dict[str, Any] = field(default_factory=dict)
    """The pod spec at pod_path ({} when it is not a mapping): whoever finds the path has
    it in hand, so it is not looked up again."""
    pod_labels: dict[str, str] = field(default_factory=dict)
    template_annotations: dict[str, str] = field(default_factory=dict)
    replicas: int | None = None
    """Declared replicas for scaled kinds (1 when unset); None for kinds without a scale."""
    embedded: bool = False
    """A pod template found inside a kind check does not know (a CRD)."""
    hpa: Hpa | None = None
    """The HPA that targets it (set by Index when it matches objects; ask the Index)."""
    role: Role | None = None
    """Which pods of a LeaderWorkerSet group this template makes (None: not a group)."""
    per_group: int | None = None
    """Pods of each group this template makes (a group part; None when size is unknown)."""
    # Every rule's loop asks for these of every workload: set when it is made, they are read
    # as plain attributes (a `once` field is read through its descriptor every time).
    grace_set: bool = field(init=False, repr=False, compare=False)
    grace: float = field(init=False, repr=False, compare=False)
    containers: list[Container] = field(init=False, repr=False, compare=False)
    _annotation_numbers: dict[str, float | None] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    """annotation_number's answers, by key."""
    serving: list[Any] | None = field(default=None, init=False, repr=False, compare=False)
    """rules.termination.serving()'s answer, once asked (a dozen rules ask of every
    workload: a plain attribute, where a lookup in __dict__ read the dict's descriptor)."""

    def __post_init__(self) -> None:
        seconds = number(self.pod.get("terminationGracePeriodSeconds"))
        self.grace_set = seconds is not None
        self.grace = DEFAULT_GRACE_SECONDS if seconds is None else seconds
        self.containers = [
            Container(i, c, (*self.pod_path, "containers", i))
            for i, c in enumerate(sequence(self.pod.get("containers")))
            if isinstance(c, dict)
        ]

    @property
    def expected_replicas(self) -> int | None:
        """The scale the disruption controller would use: HPA minimum, else replicas (once
        the Index has matched objects; ask the Index)."""
        if self.hpa is None:
            return self.replicas
        if self.role is None:
            return self.hpa.min_replicas
        # An HPA on a LeaderWorkerSet scales groups (its scale subresource is spec.replicas).
        return None if self.per_group is None else self.hpa.min_replicas * self.per_group

    @once
    def ignored(self) -> frozenset[str]:
        return _ignores(self.annotations) | _ignores(self.template_annotations)

    def annotation(self, key: str) -> str | None:
        return self.template_annotations.get(key, self.annotations.get(key))

    def annotation_number(self, key: str) -> float | None:
        """The annotation as a number (see number()), None when unset or not one. Several
        rules ask for every workload's declared seconds: each key is read once."""
        numbers = self._annotation_numbers
        if key in numbers:
            return numbers[key]
        text = self.annotation(key)
        value = numbers[key] = number(text) if text is not None else None
        return value

    @property
    def grace_path(self) -> Path:
        return (*self.pod_path, "terminationGracePeriodSeconds")

    @once
    def init_containers(self) -> list[Container]:
        return [
            Container(i, c, (*self.pod_path, "initContainers", i))
            for i, c in enumerate(sequence(self.pod.get("initContainers")))
            if isinstance(c, dict)
        ]

    @once  # cached: most rules ask for the strategy of every workload
    def strategy(self) -> dict[str, Any]:
        spec = mapping(self.obj.get("spec"))
        key = "updateStrategy" if self.ref.kind in ("StatefulSet", "DaemonSet") else "strategy"
        return mapping(spec.get(key))

    @property
    def selector_labels(self) -> dict[str, str]:
        return string_map(mapping(mapping(self.obj.get("spec")).get("selector")).get("matchLabels"))


@dataclass
class Pdb(Subject):
    spec: PdbSpec | None = None
    spec_error: str | None = None
    selector: Selector | None = None
    """None: no selector, which selects no pods in policy/v1."""
    selected: list[Workload] = field(default_factory=list)
    """The workloads whose pods it selects (set by Index when it matches objects)."""

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)

    # Read only once the Index has matched objects (ask the Index): three rules ask.
    @once
    def expected_pods(self) -> int | None:
        """Sum of the selected workloads' scales, or None when one is not known statically."""
        if not self.selected:
            return None
        total = 0
        for w in self.selected:
            if w.ref.kind not in SCALED_KINDS:
                return None
            scale = w.expected_replicas
            if scale is None:
                return None
            total += scale
        return total

    @once
    def allowed(self) -> int | None:
        """disruptionsAllowed with every expected pod ready (None: spec or scale unknown)."""
        total = self.expected_pods
        if self.spec is None or total is None:
            return None
        return best_case_disruptions(self.spec, total)


@dataclass
class Service(Subject):
    selector: dict[str, str] = field(default_factory=dict)
    type: str = "ClusterIP"
    external_traffic_policy: str = "Cluster"

    def selects(self, labels: Mapping[str, str]) -> bool:
        # A Service without a selector has manually managed endpoints: it selects no pods.
        return bool(self.selector) and all(labels.get(k) == v for k, v in self.selector.items())

    @property
    def health_checked_externally(self) -> bool:
        return self.type == "LoadBalancer" or self.external_traffic_policy == "Local"


@dataclass
class Group(Subject):
    """A LeaderWorkerSet: whole groups of `size` pods, `groups` of them."""

    groups: int | None = None
    size: int | None = None
    restart_policy: str = DEFAULT_RESTART_POLICY
    leader: Workload | None = None
    workers: Workload | None = None
    """None when the leader template makes every pod (no leaderTemplate) or size is 1."""

    @once
    def ignored(self) -> frozenset[str]:
        """Findings on either template are about this one object (its paths tell which), so
        the engine asks the set: an ignore annotation on either template counts."""
        found = _ignores(self.annotations)
        for part in self.parts:
            found |= _ignores(part.template_annotations)
        return found

    @property
    def recreates_group(self) -> bool:
        return self.restart_policy in RECREATE_GROUP_POLICIES

    @property
    def parts(self) -> list[Workload]:
        return [w for w in (self.leader, self.workers) if w is not None]


@dataclass
class Hpa(Subject):
    target_kind: str = ""
    target_name: str = ""
    min_replicas: int = 1
    max_replicas: int | None = None


_new_tuple = tuple.__new__
"""ObjectRef's own __new__ is a Python function over this: _ref calls it directly (one ref
per object read; with `mapping` written inline, -0.3 % instructions on the findings-heavy
corpus, 4,676 -> 4,662 M)."""


def _ref(obj: Mapping[str, Any], kind: str) -> ObjectRef:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace") or DEFAULT_NAMESPACE
    return _new_tuple(ObjectRef, (kind, str(namespace), str(name)))


def namespace_of(obj: Mapping[str, Any]) -> str:
    """The namespace every subject made of `obj` is in (as _ref names it)."""
    return str(mapping(obj.get("metadata")).get("namespace") or DEFAULT_NAMESPACE)


@dataclass(frozen=True)
class WholeInput:
    """Facts of the whole input, for an index that holds a part of it (check.parallel):
    the rules' other questions are about one namespace, which a part holds whole."""

    workloads: int
    """len(Index.workloads) over the whole input."""
    standalone: bool
    """Whether any of them is a workload of its own (not a pod template inside another kind)."""


UNTOLD = WholeInput(-1, False)
"""An index's `whole` while it holds part of the input and the whole's facts are not yet
known (check.parallel: only rules that do not ask them run then)."""


def _told(whole: WholeInput) -> WholeInput:
    if whole is UNTOLD:
        raise RuntimeError("a rule asked the whole input's facts before a worker was told "
                           "them: register it with whole_input=True")
    return whole


@dataclass
class Index:
    workloads: list[Workload] = field(default_factory=list)
    pdbs: list[Pdb] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    hpas: list[Hpa] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    skipped: int = 0
    """Objects of kinds check does not audit."""
    _pdbs_by_ns: dict[str, list[Pdb]] = field(default_factory=lambda: defaultdict(list))
    _services_by_ns: dict[str, list[Service]] = field(default_factory=lambda: defaultdict(list))
    _hpas_by_target: dict[tuple[str, str, str], Hpa] = field(default_factory=dict)
    _workloads_by_ns: dict[str, list[Workload]] = field(
        default_factory=lambda: defaultdict(list))
    # Lookups several rules repeat, keyed by object identity (objects live as long as this).
    _pdbs_of: dict[int, list[Pdb]] = field(default_factory=dict)
    _services_of: dict[int, list[Service]] = field(default_factory=dict)
    _matched: bool = False
    whole: WholeInput | None = None
    """Set when this index holds part of the input (see WholeInput)."""
    _everything: list[Subject] | None = None
    """Every subject, once the lists are narrowed to a share (see narrow)."""

    @property
    def checked(self) -> int:
        return (len(self.workloads) + len(self.pdbs) + len(self.services) + len(self.hpas)
                + len(self.groups))

    def add(self, doc: Document) -> None:
        """Add one object. Every object is added before the first question (build_index):
        objects are matched to each other once, then."""
        obj = doc.obj
        kind = obj.get("kind")
        if not isinstance(kind, str):
            self.skipped += 1
            return
        if kind in WORKLOAD_KINDS or kind == "Pod":
            workload = _workload(doc, kind)
            self.workloads.append(workload)
            self._workloads_by_ns[workload.ref.namespace].append(workload)
        elif kind == GROUP_KIND:
            group = _group(doc)
            self.groups.append(group)
            for part in group.parts:
                self.workloads.append(part)
                self._workloads_by_ns[part.ref.namespace].append(part)
        elif kind == "PodDisruptionBudget":
            pdb = _pdb(doc)
            self.pdbs.append(pdb)
            self._pdbs_by_ns[pdb.ref.namespace].append(pdb)
        elif kind == "Service":
            svc = _service(doc)
            self.services.append(svc)
            self._services_by_ns[svc.ref.namespace].append(svc)
        elif kind == "HorizontalPodAutoscaler":
            hpa = _hpa(doc)
            self.hpas.append(hpa)
            self._hpas_by_target[(hpa.ref.namespace, hpa.target_kind, hpa.target_name)] = hpa
        else:
            found = list(_embedded(doc, kind))
            if found:
                self.workloads.extend(found)
            else:
                self.skipped += 1

    def workload_count(self) -> int:
        """How many workloads the whole input has."""
        if self.whole is None:
            return len(self.workloads)
        return _told(self.whole).workloads

    def has_standalone_workload(self) -> bool:
        """Whether the whole input has a workload of its own (not only pod templates inside
        other kinds)."""
        if self.whole is not None:
            return _told(self.whole).standalone
        return any(not w.embedded for w in self.workloads)

    def workloads_in(self, namespace: str) -> list[Workload]:
        """The workloads of a namespace (pod templates inside other kinds excluded), in
        input order: a lookup, where a scan of every workload per object would make a rule
        quadratic in the input."""
        return self._workloads_by_ns.get(namespace, [])

    def pdbs_for(self, w: Workload) -> list[Pdb]:
        if w.embedded:
            return []
        if not self._matched:  # computed once, on the first question
            self._match()
        return self._pdbs_of.get(id(w), [])

    def services_for(self, w: Workload) -> list[Service]:
        if w.embedded:
            return []
        if not self._matched:  # computed once, on the first question
            self._match()
        return self._services_of.get(id(w), [])

    def _match(self) -> None:
        """Which PDBs and Services select which workloads' pods, computed once.

        Candidates come from an inverted index of pod labels (a selector's first
        single-value requirement), so matching stays linear in the number of objects.
        """
        if self._matched:
            return
        self._matched = True
        by_label: dict[tuple[str, str, str], list[Workload]] = defaultdict(list)
        hpas = self._hpas_by_target
        for w in self.workloads:
            ref = w.ref
            w.hpa = hpas.get((ref.namespace, ref.kind, ref.name)) if hpas else None
            if w.embedded:
                continue
            for k, v in w.pod_labels.items():
                by_label[(ref.namespace, k, v)].append(w)
        for pdb in self.pdbs:
            if pdb.selector is None:
                continue
            candidates = by_ns = self._workloads_by_ns.get(pdb.ref.namespace, [])
            for req in pdb.selector.requirements:
                if req.operator == "In" and len(req.values) == 1:
                    candidates = by_label.get((pdb.ref.namespace, req.key, req.values[0]), [])
                    break
            if len(pdb.selector.requirements) == 1 and candidates is not by_ns:
                selected = list(candidates)  # its one requirement found them
            else:
                selected = [w for w in candidates if pdb.selects(w.pod_labels)]
            pdb.selected = selected
            for w in selected:
                self._pdbs_of.setdefault(id(w), []).append(pdb)
        for svc in self.services:
            if not svc.selector:
                continue
            k, v = next(iter(svc.selector.items()))
            single = len(svc.selector) == 1  # then every candidate matches it
            for w in by_label.get((svc.ref.namespace, k, v), []):
                if single or svc.selects(w.pod_labels):
                    self._services_of.setdefault(id(w), []).append(svc)

    def pdbs_for_group(self, g: Group) -> list[Pdb]:
        """The PDBs selecting any pod of the group, each once."""
        found: list[Pdb] = []
        for part in g.parts:
            found.extend(p for p in self.pdbs_for(part) if p not in found)
        return found

    def hpa_for(self, w: Workload) -> Hpa | None:
        if not self._matched:  # computed once, on the first question
            self._match()
        return w.hpa

    def expected_replicas(self, w: Workload) -> int | None:
        """The scale the disruption controller would use: HPA minimum, else replicas."""
        if not self._matched:  # computed once, on the first question
            self._match()
        return w.expected_replicas

    def workloads_selected_by(self, pdb: Pdb) -> list[Workload]:
        if not self._matched:  # computed once, on the first question
            self._match()
        return pdb.selected

    def expected_pods(self, pdb: Pdb) -> int | None:
        """Sum of the workloads' scales the PDB selects, None when one is not known."""
        if not self._matched:  # computed once, on the first question
            self._match()
        return pdb.expected_pods

    def allowed(self, pdb: Pdb) -> int | None:
        """The PDB's disruptionsAllowed with every expected pod ready (None: unknown)."""
        if not self._matched:  # computed once, on the first question
            self._match()
        return pdb.allowed

    def iter_subjects(self) -> Iterator[Subject]:
        """Every subject of the input (of the whole input, once narrowed)."""
        if self._everything is not None:
            yield from self._everything
            return
        yield from self.workloads
        yield from self.pdbs
        yield from self.services
        yield from self.hpas
        yield from self.groups

    def narrow(self, owned: set[int]) -> None:
        """Keep in the lists the rules walk only the subjects of the documents whose id()
        is in `owned` (a worker's share, check.parallel); every question about other
        objects (their PDBs, Services, HPAs, namespaces, workload count) still answers from
        the whole input, matched before."""
        self._match()
        self._everything = list(self.iter_subjects())
        if self.whole is None:
            self.whole = WholeInput(self.workload_count(), self.has_standalone_workload())
        self.workloads = [w for w in self.workloads if id(w.doc) in owned]
        self.pdbs = [p for p in self.pdbs if id(p.doc) in owned]
        self.services = [s for s in self.services if id(s.doc) in owned]
        self.hpas = [h for h in self.hpas if id(h.doc) in owned]
        self.groups = [g for g in self.groups if id(g.doc) in owned]


def _workload(doc: Document, kind: str) -> Workload:
    obj = doc.obj
    ref = _ref(obj, kind)
    if kind == "Pod":
        meta = mapping(obj.get("metadata"))
        return Workload(doc, ref, pod_path=("spec",), pod=mapping(obj.get("spec")),
                        pod_labels=string_map(meta.get("labels")), template_annotations={})
    spec = mapping(obj.get("spec"))
    template = mapping(spec.get("template"))
    template_meta = mapping(template.get("metadata"))
    replicas: int | None = None
    if kind in SCALED_KINDS:
        replicas = integer(spec.get("replicas"))
        if replicas is None and spec.get("replicas") is None:  # unset or null: the default
            replicas = 1
    return Workload(
        doc, ref, pod_path=("spec", "template", "spec"), pod=mapping(template.get("spec")),
        pod_labels=string_map(template_meta.get("labels")),
        template_annotations=string_map(template_meta.get("annotations")),
        replicas=replicas,
    )


def _group(doc: Document) -> Group:
    obj = doc.obj
    ref = _ref(obj, GROUP_KIND)
    spec = mapping(obj.get("spec"))
    template = mapping(spec.get("leaderWorkerTemplate"))
    groups = integer(spec.get("replicas")) if spec.get("replicas") is not None else 1
    size = integer(template.get("size")) if template.get("size") is not None else 1
    policy = template.get("restartPolicy")
    group = Group(doc, ref, groups=groups, size=size,
                  restart_policy=policy if isinstance(policy, str) and policy
                  else DEFAULT_RESTART_POLICY)
    base = ("spec", "leaderWorkerTemplate")
    has_leader = isinstance(template.get("leaderTemplate"), dict)
    if has_leader:
        group.leader = _group_part(doc, ref, (*base, "leaderTemplate"), "leader", groups, 1)
        if size is None or size > 1:
            per = None if size is None else size - 1
            group.workers = _group_part(doc, ref, (*base, "workerTemplate"), "workers",
                                        groups, per)
    else:  # lws makes leaders from the worker template: one template, every pod
        group.leader = _group_part(doc, ref, (*base, "workerTemplate"), "leader", groups, size)
    return group


def _group_part(doc: Document, ref: ObjectRef, path: Path, role: Role, groups: int | None,
                per_group: int | None) -> Workload:
    template = mapping(doc.obj)
    for key in path:
        template = mapping(template.get(str(key)))
    meta = mapping(template.get("metadata"))
    labels = {**string_map(meta.get("labels")), LWS_NAME_LABEL: ref.name}
    return Workload(
        doc, ref,
        pod_path=(*path, "spec"), pod=mapping(template.get("spec")), pod_labels=labels,
        template_annotations=string_map(meta.get("annotations")),
        replicas=None if groups is None or per_group is None else groups * per_group,
        role=role, per_group=per_group)


def _embedded(doc: Document, kind: str) -> Iterator[Workload]:
    """Pod specs inside other kinds (CronJob, RayService, KServe templates...)."""
    ref = _ref(doc.obj, kind)
    stack: list[tuple[Path, Any, int]] = [((), doc.obj.get("spec"), 0)]
    base: Path = ("spec",)
    while stack:
        path, node, depth = stack.pop()
        if depth > MAX_EMBEDDED_DEPTH:
            continue
        if isinstance(node, dict):
            containers = node.get("containers")
            if isinstance(containers, list) and any(
                    isinstance(c, dict) and "image" in c for c in containers):
                full = (*base, *path)
                where = ".".join(str(k) for k in full)
                yield Workload(doc, ObjectRef(kind, ref.namespace, f"{ref.name} ({where})"),
                               pod_path=full, pod=node, embedded=True)
                continue
            for key, value in node.items():
                if isinstance(value, dict | list):
                    stack.append(((*path, str(key)), value, depth + 1))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, dict | list):
                    stack.append(((*path, i), value, depth + 1))


def _pdb(doc: Document) -> Pdb:
    obj = doc.obj
    spec = mapping(obj.get("spec"))
    pdb = Pdb(doc, _ref(obj, "PodDisruptionBudget"))
    try:
        pdb.spec = PdbSpec.from_manifest(spec)
    except BudgetSpecError as exc:
        pdb.spec_error = str(exc)
    raw = spec.get("selector")
    if isinstance(raw, dict):
        try:
            pdb.selector = from_label_selector(raw)
        except (SelectorError, AttributeError, TypeError) as exc:
            pdb.spec_error = pdb.spec_error or f"selector: {exc}"
    return pdb


def _service(doc: Document) -> Service:
    obj = doc.obj
    spec = mapping(obj.get("spec"))
    return Service(doc, _ref(obj, "Service"), selector=string_map(spec.get("selector")),
                   type=str(spec.get("type") or "ClusterIP"),
                   external_traffic_policy=str(spec.get("externalTrafficPolicy") or "Cluster"))


def _hpa(doc: Document) -> Hpa:
    obj = doc.obj
    spec = mapping(obj.get("spec"))
    target = mapping(spec.get("scaleTargetRef"))
    minimum = integer(spec.get("minReplicas"))
    return Hpa(doc, _ref(obj, "HorizontalPodAutoscaler"),
               target_kind=str(target.get("kind") or ""), target_name=str(target.get("name") or ""),
               min_replicas=1 if minimum is None else minimum,
               max_replicas=integer(spec.get("maxReplicas")))


def build_index(docs: list[Document]) -> Index:
    index = Index()
    for doc in docs:
        index.add(doc)
    return index
