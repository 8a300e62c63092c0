"""The lab's object store: what etcd plus the generic registry do for the API server.

- One global, monotonic resourceVersion (an opaque string on the wire).
- A per-resource event history window for watches; a watch from a version older than
  the window fails with 410 Expired, as the watch cache does
  (kubernetes/apiserver pkg/storage/cacher/watch_cache.go: "too old resource version").
- uid, creationTimestamp, generation (bumped when anything but metadata/status changes).
- Optimistic concurrency: an update naming a stale resourceVersion gets 409 Conflict.
- Main-resource writes keep the stored status; status writes keep everything else
  (the status subresource split of the generic registry's strategies).
- Graceful deletion of pods (kubernetes/kubernetes pkg/registry/core/pod/strategy.go
  CheckGracefulDeleteStrategy): an unscheduled or finished pod, or gracePeriodSeconds=0,
  goes at once; otherwise metadata.deletionTimestamp = now + grace and
  deletionGracePeriodSeconds are set and the pod stays until its kubelet deletes it
  again with gracePeriodSeconds=0. A second delete may only shorten the grace. A
  negative gracePeriodSeconds is one second, not "at once" (k8s.io/apiserver
  pkg/registry/rest/delete.go BeforeDelete, from v0.22.0, i.e. Kubernetes 1.22).
- Finalizers (pkg/registry/generic/registry/store.go Delete, markAsDeleting, Update):
  deleting an object with metadata.finalizers only marks it (deletionTimestamp = now,
  deletionGracePeriodSeconds 0, generation + 1 when tracked) and answers 200 with it
  (endpoints/handlers/delete.go); the update that removes the last finalizer removes it.
  A deleting object may not gain finalizers (422 Forbidden). A namespace's deletion and a
  CRD's deletion still remove their objects at once (the lab models no Terminating phase).
- ownerReferences garbage collection when an owner is removed (background: dependents
  are deleted; propagationPolicy=Orphan: their ownerReferences are removed). Done
  synchronously here, where the real garbage collector is an asynchronous controller.

All calls are synchronous and run on the event loop's thread, so each is atomic.
Readers that only look (controllers) use items()/peek(), which return the stored dicts
themselves: never mutate those. Everything returned to API callers is a copy.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from drainsafe.kube.objects import DEFAULT_GRACE_SECONDS, parse_time, rfc3339
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY, Catalog, ResourceType
from drainsafe.lab.apiserver.fields import EVERYTHING as ALL_FIELDS
from drainsafe.lab.apiserver.fields import FieldSelector
from drainsafe.labels import EVERYTHING as ALL_LABELS
from drainsafe.labels import Selector

Obj = dict[str, Any]
Admission = Callable[[ResourceType, Obj, "Obj | None"], None]

DEFAULT_HISTORY = 10_000
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand: no vowels


def clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data, several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(n))


def meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = obj["metadata"] = {}
    return m


@dataclass(frozen=True)
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    resource: str  # ResourceType.key
    obj: Obj  # the new state; the last state for DELETED
    old: Obj | None
    rv: int


@dataclass(eq=False)
class Watch:
    """One watcher's queue of events, fed by the store in resourceVersion order."""

    resource: str
    namespace: str | None
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def close(self) -> None:
        """End the watch: the consumer reads None after any queued events."""
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)

    def offer(self, ev: Event) -> None:
        if self.closed:
            return
        if self.namespace is not None and meta(ev.obj).get("namespace") != self.namespace:
            return
        self.queue.put_nowait(ev)


class Store:
    def __init__(self, *, history: int = DEFAULT_HISTORY,
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._history_size = history
        self._rv = 0
        # The kinds served; CustomResourceDefinitions add to it (drainsafe.lab.apiserver.crd),
        # so the per-resource tables grow on first use.
        self.catalog = Catalog()
        self._objects: defaultdict[str, dict[tuple[str, str], Obj]] = defaultdict(dict)
        self._history: defaultdict[str, deque[Event]] = defaultdict(deque)
        self._dropped: defaultdict[str, int] = defaultdict(int)
        self._watches: defaultdict[str, set[Watch]] = defaultdict(set)
        self._listeners: list[Callable[[Event], None]] = []
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self.admission: list[Admission] = []

    # ---- reading -------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def peek(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects[rt.key].get((namespace if rt.namespaced else "", name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        objs = self._objects[rt.key].values()
        if namespace is None or not rt.namespaced:
            return iter(list(objs))
        return iter([o for o in objs if o["metadata"].get("namespace") == namespace])

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.peek(rt, namespace, name)
        if obj is None:
            raise st.not_found(rt.group, rt.plural, name)
        return clone(obj)  # type: ignore[no-any-return]

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        labels: Selector = ALL_LABELS,
        fields: FieldSelector = ALL_FIELDS,
    ) -> tuple[list[Obj], int]:
        """Matching objects sorted by (namespace, name), and the list's resourceVersion."""
        out = [
            o for o in self.items(rt, namespace)
            if labels.matches(o["metadata"].get("labels")) and fields.matches(o)
        ]
        out.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return [clone(o) for o in out], self._rv

    # ---- watching ------------------------------------------------------------------

    def listen(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback` synchronously after every change; returns an unsubscribe."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def watch(self, rt: ResourceType, since: int | None,
              namespace: str | None = None) -> Watch:
        """Events with resourceVersion > since; since=None starts with the current state
        as synthetic ADDED events. Raises 410 Expired if `since` left the window."""
        w = Watch(rt.key, namespace if rt.namespaced else None)
        if since is None:
            for o in sorted(self._objects[rt.key].values(),
                            key=lambda o: int(o["metadata"]["resourceVersion"])):
                w.offer(Event("ADDED", rt.key, o, None, int(o["metadata"]["resourceVersion"])))
        else:
            if since < self._dropped[rt.key]:
                raise st.expired(
                    f"too old resource version: {since} ({self._dropped[rt.key] + 1})")
            for ev in self._history[rt.key]:
                if ev.rv > since:
                    w.offer(ev)
        self._watches[rt.key].add(w)
        return w

    def unwatch(self, w: Watch) -> None:
        w.close()
        self._watches[w.resource].discard(w)

    def close_watches(self) -> None:
        """End every open watch (server shutdown: clients re-watch, as after a timeout)."""
        for ws in self._watches.values():
            for w in list(ws):
                self.unwatch(w)

    def watching(self, key: str) -> int:
        """How many watches of a resource are open."""
        return len(self._watches.get(key, ()))

    def oldest_watchable(self, rt: ResourceType) -> int:
        return self._dropped[rt.key]

    def _emit(self, ev: Event) -> None:
        hist = self._history[ev.resource]
        hist.append(ev)
        while len(hist) > self._history_size:
            self._dropped[ev.resource] = hist.popleft().rv
        for w in list(self._watches[ev.resource]):
            w.offer(ev)
        for cb in list(self._listeners):
            cb(ev)

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    # ---- writing -------------------------------------------------------------------

    def _key(self, rt: ResourceType, obj: Obj) -> tuple[str, str]:
        m = meta(obj)
        return (m.get("namespace", "") if rt.namespaced else "", m.get("name", ""))

    def _index_owners(self, rt: ResourceType, obj: Obj, add: bool) -> None:
        m = obj["metadata"]
        entry = (rt.key, m.get("namespace", ""), m["name"])
        for ref in m.get("ownerReferences") or []:
            uid = ref.get("uid")
            if not uid:
                continue
            deps = self._dependents.setdefault(uid, set())
            if add:
                deps.add(entry)
            else:
                deps.discard(entry)
                if not deps:
                    del self._dependents[uid]

    def _admit(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        for hook in self.admission:
            hook(rt, obj, old)

    def create(self, rt: ResourceType, obj: Obj, *, namespace: str | None = None,
               dry_run: bool = False) -> Obj:
        obj = clone(obj)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        m = meta(obj)
        if rt.namespaced:
            ns = namespace or m.get("namespace") or "default"
            if m.get("namespace") and m["namespace"] != ns:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request")
            m["namespace"] = ns
            if rt.key != "namespaces" and self.peek(BY_KEY["namespaces"], "", ns) is None:
                raise st.not_found("", "namespaces", ns)
        else:
            m.pop("namespace", None)
        if not m.get("name"):
            if not m.get("generateName"):
                raise st.invalid(rt.kind, "", [("metadata.name",
                                 "Required value: name or generateName is required")])
            m["name"] = m["generateName"] + random_suffix()
        if not _NAME.match(m["name"]) or len(m["name"]) > 253:
            raise st.invalid(rt.kind, m["name"], [(
                "metadata.name",
                f'Invalid value: "{m["name"]}": a lowercase RFC 1123 subdomain must consist '
                "of lower case alphanumeric characters, '-' or '.'")])
        key = self._key(rt, obj)
        if key in self._objects[rt.key]:
            raise st.already_exists(rt.group, rt.plural, m["name"])
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            m.pop(f, None)
        m["uid"] = str(uuid.uuid4())
        m["creationTimestamp"] = rfc3339(self.clock())
        if "spec" in obj or rt.has_status:
            m["generation"] = 1
        self._admit(rt, obj, None)
        if dry_run:
            m["resourceVersion"] = str(self._rv)
            return obj
        m["resourceVersion"] = str(self._next_rv())
        self._objects[rt.key][key] = obj
        self._index_owners(rt, obj, add=True)
        self._emit(Event("ADDED", rt.key, obj, None, self._rv))
        return clone(obj)  # type: ignore[no-any-return]

    def update(self, rt: ResourceType, obj: Obj, *, subresource: str | None = None,
               dry_run: bool = False) -> Obj:
        """PUT semantics. subresource='status' writes only the status."""
        new = clone(obj)
        m = meta(new)
        key = (m.get("namespace", "") if rt.namespaced else "", m.get("name", ""))
        old = self._objects[rt.key].get(key)
        if old is None:
            raise st.not_found(rt.group, rt.plural, key[1])
        om = old["metadata"]
        if m.get("resourceVersion") and m["resourceVersion"] != om["resourceVersion"]:
            raise st.conflict(rt.group, rt.plural, key[1],
                              "the object has been modified; please apply your changes "
                              "to the latest version and try again")
        if m.get("uid") and m["uid"] != om["uid"]:
            raise st.conflict(rt.group, rt.plural, key[1],
                              f"Precondition failed: UID in precondition: {m['uid']}, "
                              f"UID in object meta: {om['uid']}")
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is not None:
                new["status"] = status
            else:
                new.pop("status", None)
        else:
            if rt.has_status:
                if "status" in old:
                    new["status"] = clone(old["status"])
                else:
                    new.pop("status", None)
            for f in ("uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation"):
                if f in om:
                    m[f] = om[f]
                else:
                    m.pop(f, None)
            if rt.namespaced:
                m["namespace"] = om["namespace"]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        new["metadata"]["resourceVersion"] = om["resourceVersion"]
        if om.get("deletionTimestamp"):
            added = [f for f in m.get("finalizers") or [] if f not in (om.get("finalizers") or [])]
            if added:
                raise st.invalid(rt.kind, key[1], [(
                    "metadata.finalizers", "Forbidden: no new finalizers can be added if the "
                    "object is being deleted, found new finalizers []string{" +
                    ", ".join(f'"{f}"' for f in added) + "}")])
        self._admit(rt, new, old)
        if _spec_changed(old, new, status_is_spec=not rt.has_status):
            new["metadata"]["generation"] = int(om.get("generation", 0)) + 1
        if new == old:
            return clone(old)  # type: ignore[no-any-return]  # no-op: no new version
        if dry_run:
            return new  # type: ignore[no-any-return]
        if om.get("deletionTimestamp") and om.get("deletionGracePeriodSeconds") == 0 \
                and not new["metadata"].get("finalizers"):
            # The last finalizer went: the stored object is deleted instead of updated
            # (shouldDeleteDuringUpdate, deleteWithoutFinalizers): watchers see DELETED.
            return self._remove(rt, key, "Background")
        return self._replace(rt, key, old, new)

    def _replace(self, rt: ResourceType, key: tuple[str, str], old: Obj, new: Obj) -> Obj:
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self._index_owners(rt, old, add=False)
        self._objects[rt.key][key] = new
        self._index_owners(rt, new, add=True)
        self._emit(Event("MODIFIED", rt.key, new, old, self._rv))
        return clone(new)  # type: ignore[no-any-return]

    def mutate(self, rt: ResourceType, namespace: str, name: str,
               change: Callable[[Obj], None], *, subresource: str | None = None) -> Obj:
        """Read-modify-write of the current version (controllers' convenience)."""
        obj = self.get(rt, namespace, name)
        change(obj)
        return self.update(rt, obj, subresource=subresource)

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        grace_period: int | None = None,
        preconditions: dict[str, Any] | None = None,
        propagation: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """DELETE semantics; returns the object as it now is (or last was)."""
        key = (namespace if rt.namespaced else "", name)
        old = self._objects[rt.key].get(key)
        if old is None:
            raise st.not_found(rt.group, rt.plural, name)
        om = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != om["uid"]:
            raise st.conflict(rt.group, rt.plural, name,
                              f"Precondition failed: UID in precondition: {pre['uid']}, "
                              f"UID in object meta: {om['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != om["resourceVersion"]:
            raise st.conflict(rt.group, rt.plural, name,
                              "Precondition failed: ResourceVersion in precondition: "
                              f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                              f"{om['resourceVersion']}")
        if rt.key == "pods":
            grace = grace_period
            if grace is None:
                grace = int(old.get("spec", {}).get("terminationGracePeriodSeconds",
                                                    DEFAULT_GRACE_SECONDS))
            elif grace < 0:  # BeforeDelete: a negative grace is one second, not "at once"
                grace = 1
            if _pod_may_go_at_once(old):
                grace = 0
            if grace > 0:
                return self._begin_graceful(rt, key, old, max(grace, 1), dry_run)
        if om.get("finalizers"):
            return self._mark_deleted(rt, key, old, dry_run)
        if dry_run:
            return clone(old)  # type: ignore[no-any-return]
        return self._remove(rt, key, propagation or "Background")

    def _mark_deleted(self, rt: ResourceType, key: tuple[str, str], old: Obj,
                      dry_run: bool) -> Obj:
        """A deletion its finalizers hold: the object stays, marked, until they are gone."""
        om = old["metadata"]
        if om.get("deletionTimestamp") and om.get("deletionGracePeriodSeconds") == 0:
            return clone(old)  # type: ignore[no-any-return]  # already marked
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = rfc3339(self.clock())
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        if int(om.get("generation") or 0) > 0:
            # markAsDeleting: the first mark bumps a tracked generation, so a controller
            # comparing observedGeneration sees the deletion as a spec change
            new["metadata"]["generation"] = int(om["generation"]) + 1
        if dry_run:
            return new  # type: ignore[no-any-return]
        return self._replace(rt, key, old, new)

    def _begin_graceful(self, rt: ResourceType, key: tuple[str, str], old: Obj,
                        grace: int, dry_run: bool) -> Obj:
        now = self.clock()
        om = old["metadata"]
        current = om.get("deletionGracePeriodSeconds")
        deadline = parse_time(om.get("deletionTimestamp"))
        if current is not None and deadline is not None and now + grace >= deadline:
            return clone(old)  # type: ignore[no-any-return]  # only shortening is allowed
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = rfc3339(now + grace)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        if dry_run:
            return new  # type: ignore[no-any-return]
        return self._replace(rt, key, old, new)

    def _remove(self, rt: ResourceType, key: tuple[str, str], propagation: str) -> Obj:
        old = self._objects[rt.key].pop(key)
        self._index_owners(rt, old, add=False)
        last = clone(old)
        last["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(Event("DELETED", rt.key, last, old, self._rv))
        self._collect(old, propagation)
        if rt.key == "namespaces":
            for res in self.catalog.resource_keys():
                other = self.catalog.by_key(res)
                if other is not None and other.namespaced:
                    for o in list(self.items(other, key[1])):
                        if (key[1], o["metadata"]["name"]) in self._objects[other.key]:
                            self._remove(other, (key[1], o["metadata"]["name"]), "Background")
        return clone(last)  # type: ignore[no-any-return]

    def _collect(self, owner: Obj, propagation: str) -> None:
        uid = owner["metadata"]["uid"]
        for res, ns, name in sorted(self._dependents.get(uid, ())):
            found = self.catalog.by_key(res)
            if found is None:
                continue
            rt = found
            dep = self.peek(rt, ns, name)
            if dep is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            if propagation == "Orphan":
                kept = [r for r in refs if r.get("uid") != uid]
                self.mutate(rt, ns, name, _owners_setter(kept))
            elif not any(r.get("uid") != uid and self._owner_alive(r, ns) for r in refs):
                self.delete(rt, ns, name)

    def _owner_alive(self, ref: Obj, namespace: str) -> bool:
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        for rt in self.catalog.all():
            if rt.kind == ref.get("kind") and rt.group == group:
                o = self.peek(rt, namespace, str(ref.get("name")))
                return o is not None and o["metadata"]["uid"] == ref.get("uid")
        return False

    def forget(self, rt: ResourceType) -> None:
        """Stop storing a resource (its CustomResourceDefinition is gone): every object
        is deleted (watchers see DELETED, dependents are collected), then its watches end
        and its history goes, as the custom resource's storage is torn down."""
        for key in list(self._objects.get(rt.key, {})):
            self._remove(rt, key, "Background")
        for w in list(self._watches.get(rt.key, ())):
            self.unwatch(w)
        for table in (self._objects, self._history, self._dropped, self._watches):
            table.pop(rt.key, None)

    def dependents(self, owner_uid: str) -> Iterable[tuple[str, str, str]]:
        return tuple(sorted(self._dependents.get(owner_uid, ())))


def _owners_setter(refs: list[Obj]) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        if refs:
            obj["metadata"]["ownerReferences"] = refs
        else:
            obj["metadata"].pop("ownerReferences", None)

    return change


def _pod_may_go_at_once(pod: Obj) -> bool:
    """An unscheduled pod has no kubelet to wait for; a finished one has nothing to stop."""
    return not pod.get("spec", {}).get("nodeName") or pod.get("status", {}).get("phase") in (
        "Succeeded", "Failed")


_NOT_SPEC = frozenset({"metadata", "status", "apiVersion", "kind"})


def _spec_changed(old: Obj, new: Obj, *, status_is_spec: bool = False) -> bool:
    """Whether metadata.generation moves: anything but metadata changed, status too
    unless the kind has a status subresource (the custom resource strategy's
    PrepareForUpdate; built-in kinds without one have no status)."""
    keys = (set(old) | set(new)) - _NOT_SPEC
    if status_is_spec:
        keys.add("status")
    return any(old.get(k) != new.get(k) for k in keys)
