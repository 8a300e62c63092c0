"""Deployment controller: ReplicaSets per pod template, rolling update and Recreate.

After kubernetes/kubernetes pkg/controller/deployment (sync.go, rolling.go, recreate.go,
util/deployment_util.go):
- the new ReplicaSet is the one whose template equals the Deployment's (ignoring the
  pod-template-hash label); it is named <deployment>-<hash> and gets revision
  max(old revisions)+1 (deployment.kubernetes.io/revision), also when an old template
  comes back (rollback);
- RollingUpdate: maxSurge rounds up, maxUnavailable rounds down, both 0 means
  maxUnavailable 1 (ResolveFenceposts); the new RS scales up to at most
  replicas+maxSurge pods in all; old RSes are scaled down, unhealthy ones first, only so
  far as replicas-maxUnavailable stay available (reconcileOldReplicaSets);
- Recreate: old RSes go to 0 and the new one scales up once no old pod is running;
- `kubectl rollout restart` is just a template change (the restartedAt annotation);
- a scaling event (spec.replicas not yet seen by an active RS's desired-replicas
  annotation) or a paused Deployment is handled before any rollout step, by sync.go
  `scale` (drainsafe.lab.controllers.proportion): mid-rollout the change is shared
  between the RSes in proportion to their max-replicas annotations;
- status: replicas/updated/ready/available/unavailable, observedGeneration, the Available
  condition, and Progressing as progress.go `syncRolloutStatus` sets it (at v1.31.0):
  NewReplicaSetCreated when a rollout creates its RS, ReplicaSetUpdated on progress,
  NewReplicaSetAvailable when complete - and then left alone while every replica is
  updated, so scaling a finished Deployment is not a rollout;
- old RSes beyond revisionHistoryLimit are deleted once scaled to 0.
Not emulated: progressDeadlineSeconds (no ProgressDeadlineExceeded), collisionCount,
FoundNewReplicaSet.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from drainsafe import pdb as pdbmath
from drainsafe.kube.objects import POD_TEMPLATE_HASH, parse_time, rfc3339, same_pod_template
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.lab.controllers import Controller, proportion
from drainsafe.lab.controllers.podstate import owned_by, owner_reference, set_condition
from drainsafe.lab.controllers.replicaset import pods_of

DEPLOYMENTS = BY_KEY["apps/deployments"]
REPLICASETS = BY_KEY["apps/replicasets"]
HASH_LABEL = POD_TEMPLATE_HASH
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: dict[str, Any]) -> str:
    plain = _without_hash(template)
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).digest()
    n = int.from_bytes(digest[:8], "big")
    out = []
    for _ in range(10):
        n, r = divmod(n, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "".join(out)


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    t = clone(template)
    labels = (t.get("metadata") or {}).get("labels")
    if labels and HASH_LABEL in labels:
        del labels[HASH_LABEL]
    return t  # type: ignore[no-any-return]


def revision(rs: Obj) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def fenceposts(deployment: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) in pods, as ResolveFenceposts computes them."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    ru = strategy.get("rollingUpdate") or {}
    surge = pdbmath.scaled_value(ru.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = pdbmath.scaled_value(ru.get("maxUnavailable", "25%"), replicas,
                                       round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _spec_replicas(rs: Obj) -> int:
    return int((rs.get("spec") or {}).get("replicas", 0))


def _status_int(rs: Obj, key: str) -> int:
    return int((rs.get("status") or {}).get(key, 0))


def _size(rs: Obj) -> proportion.ReplicaSetSize:
    ann = rs["metadata"].get("annotations") or {}

    def number(key: str) -> int | None:
        try:
            return int(ann[key])
        except (KeyError, ValueError):
            return None

    return proportion.ReplicaSetSize(
        name=str(rs["metadata"]["name"]),
        created=parse_time(rs["metadata"].get("creationTimestamp")) or 0.0,
        replicas=_spec_replicas(rs), desired=number(DESIRED), max_replicas=number(MAX_REPLICAS),
        available=_status_int(rs, "availableReplicas"))


def _created(rs: Obj) -> tuple[float, str]:
    return (parse_time(rs["metadata"].get("creationTimestamp")) or 0.0,
            str(rs["metadata"]["name"]))


class DeploymentController(Controller):
    name = "deployment"
    # pods too: Recreate waits for the old pods to be gone, which no RS status shows
    watches = frozenset({"apps/deployments", "apps/replicasets", "pods"})

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        # Deployment uid -> the ReplicaSet just created for it (NewReplicaSetCreated)
        self._created_rs: dict[str, str] = {}

    def reconcile(self) -> float | None:
        for d in list(self.store.items(DEPLOYMENTS)):
            if d["metadata"].get("deletionTimestamp"):
                continue
            try:
                self.sync(d)
            except st.StatusError:
                continue
        return None

    # ---- helpers -------------------------------------------------------------------

    def _scale(self, rs: Obj, replicas: int, d: Obj) -> Obj:
        surge, _ = fenceposts(d)
        want = int(d["spec"].get("replicas", 1))

        def change(o: Obj) -> None:
            o["spec"]["replicas"] = replicas
            ann = o["metadata"].setdefault("annotations", {})
            ann[DESIRED] = str(want)
            ann[MAX_REPLICAS] = str(want + surge)

        return self.store.mutate(REPLICASETS, rs["metadata"]["namespace"],
                                 rs["metadata"]["name"], change)

    def _replicasets(self, d: Obj) -> list[Obj]:
        return [rs for rs in self.store.items(REPLICASETS, d["metadata"]["namespace"])
                if owned_by(rs, d) and not rs["metadata"].get("deletionTimestamp")]

    def _new_rs(self, d: Obj, rses: list[Obj], create: bool) -> Obj | None:
        template = d["spec"].get("template") or {}
        new = next((rs for rs in rses
                    if same_pod_template(rs["spec"].get("template") or {}, template)), None)
        max_old = max((revision(rs) for rs in rses if rs is not new), default=0)
        if new is not None:
            if revision(new) <= max_old:
                new = self.store.mutate(
                    REPLICASETS, new["metadata"]["namespace"], new["metadata"]["name"],
                    lambda o: o["metadata"].setdefault("annotations", {}).update(
                        {REVISION: str(max_old + 1)}))
            return new
        if not create:
            return None
        h = template_hash(template)
        tmpl = clone(template)
        tmpl.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        sel = clone(d["spec"].get("selector") or {})
        sel.setdefault("matchLabels", {})[HASH_LABEL] = h
        spec = d["spec"]
        surge, _ = fenceposts(d)
        want = int(spec.get("replicas", 1))
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            initial = 0
        else:
            current = sum(_spec_replicas(rs) for rs in rses)
            initial = max(0, min(want + surge - current, want))
        rs = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": f"{d['metadata']['name']}-{h}",
                "namespace": d["metadata"]["namespace"],
                "labels": dict(tmpl["metadata"]["labels"]),
                "annotations": {REVISION: str(max_old + 1), DESIRED: str(want),
                                MAX_REPLICAS: str(want + surge)},
                "ownerReferences": [owner_reference(d)],
            },
            "spec": {"replicas": initial, "minReadySeconds": spec.get("minReadySeconds", 0),
                     "selector": sel, "template": tmpl},
        }
        created = self.store.create(REPLICASETS, rs)
        self._created_rs[d["metadata"]["uid"]] = created["metadata"]["name"]
        return created

    # ---- sync ----------------------------------------------------------------------

    def sync(self, d: Obj) -> None:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        spec = d.get("spec") or {}
        rses = self._replicasets(d)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        if spec.get("paused") or proportion.is_scaling_event(
                int(spec.get("replicas", 1)), [_size(rs) for rs in rses]):
            self._scale_proportionally(d, rses)  # syncDeployment: sync() before any rollout
        elif recreate:
            self._recreate(d, rses)
        else:
            new = self._new_rs(d, rses, create=True)
            assert new is not None
            self._rolling(d, new, self._replicasets(d))
        rses = self._replicasets(d)
        new = self._new_rs(d, rses, create=False) if rses else None
        self._cleanup(d, rses, new)
        self._status(d, self._replicasets(d), new)
        if new is not None and (d["metadata"].get("annotations") or {}).get(REVISION) != \
                str(revision(new)):
            self.store.mutate(DEPLOYMENTS, ns, name,
                              lambda o: o["metadata"].setdefault("annotations", {}).update(
                                  {REVISION: str(revision(new))}))

    def _scale_proportionally(self, d: Obj, rses: list[Obj]) -> None:
        """sync.go scale(): a scaling event (or a paused Deployment) during a rollout."""
        new = self._new_rs(d, rses, create=False)
        old = [rs for rs in rses if new is None or rs["metadata"]["uid"] != new["metadata"]["uid"]]
        spec = d["spec"]
        rolling = (spec.get("strategy") or {}).get("type") != "Recreate"
        surge, _ = fenceposts(d)
        sizes = proportion.scale(int(spec.get("replicas", 1)), surge if rolling else 0, rolling,
                                 _size(new) if new is not None else None,
                                 [_size(rs) for rs in old], _status_int(d, "replicas"))
        by_name = {rs["metadata"]["name"]: rs for rs in rses}
        for name, size in sizes.items():
            self._scale(by_name[name], size, d)
        if not sizes:
            # The lone ReplicaSet already has the size: record that it saw this scale, so
            # the scaling event ends (the lab keeps no other memory of it).
            for rs in rses:
                if _spec_replicas(rs) > 0:
                    self._scale(rs, _spec_replicas(rs), d)

    def _recreate(self, d: Obj, rses: list[Obj]) -> None:
        new = self._new_rs(d, rses, create=False)
        old = [rs for rs in rses if rs is not new]
        for rs in old:
            if _spec_replicas(rs) != 0:
                self._scale(rs, 0, d)
        if any(pods_of(self.store, rs) for rs in old):
            return  # wait until no old pod is left at all
        if new is None:
            new = self._new_rs(d, self._replicasets(d), create=True)
        want = int(d["spec"].get("replicas", 1))
        if new is not None and _spec_replicas(new) != want:
            self._scale(new, want, d)

    def _rolling(self, d: Obj, new: Obj, rses: list[Obj]) -> None:
        want = int(d["spec"].get("replicas", 1))
        surge, max_unavailable = fenceposts(d)
        new = next((rs for rs in rses if rs["metadata"]["uid"] == new["metadata"]["uid"]), new)
        old = sorted((rs for rs in rses if rs["metadata"]["uid"] != new["metadata"]["uid"]),
                     key=_created)
        # reconcileNewReplicaSet
        if _spec_replicas(new) > want:
            new = self._scale(new, want, d)
        elif _spec_replicas(new) < want:
            total = sum(_spec_replicas(rs) for rs in rses)
            if total < want + surge:
                up = min(want + surge - total, want - _spec_replicas(new))
                new = self._scale(new, _spec_replicas(new) + up, d)
        # reconcileOldReplicaSets
        if sum(_spec_replicas(rs) for rs in old) == 0:
            return
        all_rs = [new, *old]
        total = sum(_spec_replicas(rs) for rs in all_rs)
        min_available = want - max_unavailable
        new_unavailable = _spec_replicas(new) - _status_int(new, "availableReplicas")
        max_scaled_down = total - min_available - new_unavailable
        if max_scaled_down <= 0:
            return
        cleaned = 0
        for i, rs in enumerate(old):  # cleanupUnhealthyReplicas
            if cleaned >= max_scaled_down:
                break
            unhealthy = _spec_replicas(rs) - _status_int(rs, "availableReplicas")
            if _spec_replicas(rs) == 0 or unhealthy <= 0:
                continue
            down = min(max_scaled_down - cleaned, unhealthy)
            old[i] = self._scale(rs, _spec_replicas(rs) - down, d)
            cleaned += down
        available = sum(_status_int(rs, "availableReplicas") for rs in [new, *old])
        if available <= min_available:
            return
        budget = available - min_available
        scaled = 0
        for rs in old:  # scaleDownOldReplicaSetsForRollingUpdate, oldest first
            if scaled >= budget:
                break
            if _spec_replicas(rs) == 0:
                continue
            down = min(_spec_replicas(rs), budget - scaled)
            self._scale(rs, _spec_replicas(rs) - down, d)
            scaled += down

    def _cleanup(self, d: Obj, rses: list[Obj], new: Obj | None) -> None:
        limit = int(d["spec"].get("revisionHistoryLimit", 10))
        idle = sorted((rs for rs in rses if rs is not new and _spec_replicas(rs) == 0
                       and _status_int(rs, "replicas") == 0
                       and not pods_of(self.store, rs)), key=revision)
        for rs in idle[:max(len(idle) - limit, 0)]:
            try:
                self.store.delete(REPLICASETS, rs["metadata"]["namespace"],
                                  rs["metadata"]["name"])
            except st.StatusError:
                continue

    def _progressing(self, d: Obj, conds: list[dict[str, Any]], now: str, new: Obj | None, *,
                     replicas: int, updated: int, ready: int, available: int
                     ) -> list[dict[str, Any]]:
        """The Progressing condition as syncRolloutStatus (progress.go) sets it: once a
        rollout is complete (NewReplicaSetAvailable, every replica updated) it is left
        alone, so scaling a finished Deployment up or down is not a rollout; a created
        ReplicaSet starts one (NewReplicaSetCreated); after that it is ReplicaSetUpdated
        on each sign of progress until complete. progressDeadlineSeconds is not
        emulated (no ProgressDeadlineExceeded)."""
        want = int(d["spec"].get("replicas", 1))
        subject = (f'ReplicaSet "{new["metadata"]["name"]}"' if new is not None
                   else f'Deployment "{d["metadata"]["name"]}"')
        created = self._created_rs.pop(d["metadata"]["uid"], None)
        if created is not None:
            conds = set_condition(conds, {
                "type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                "message": f'Created new replica set "{created}"'}, now, update_time=True)
        current = next((c for c in conds if c.get("type") == "Progressing"), None)
        if replicas == updated and current is not None \
                and current.get("reason") == "NewReplicaSetAvailable":
            return conds  # isCompleteDeployment
        old = d.get("status") or {}
        old_outdated = int(old.get("replicas", 0)) - int(old.get("updatedReplicas", 0))
        if updated == want and replicas == want and available == want:  # DeploymentComplete
            return set_condition(conds, {
                "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                "message": f"{subject} has successfully progressed."}, now, update_time=True)
        if (updated > int(old.get("updatedReplicas", 0))  # DeploymentProgressing
                or replicas - updated < old_outdated
                or ready > int(old.get("readyReplicas", 0))
                or available > int(old.get("availableReplicas", 0))):
            return set_condition(conds, {
                "type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                "message": f"{subject} is progressing."}, now, update_time=True)
        return conds

    def _status(self, d: Obj, rses: list[Obj], new: Obj | None) -> None:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        current = self.store.peek(DEPLOYMENTS, ns, name)
        if current is None:
            return
        want = int(current["spec"].get("replicas", 1))
        _, max_unavailable = fenceposts(current)
        replicas = sum(_status_int(rs, "replicas") for rs in rses)
        updated = _status_int(new, "replicas") if new is not None else 0
        ready = sum(_status_int(rs, "readyReplicas") for rs in rses)
        available = sum(_status_int(rs, "availableReplicas") for rs in rses)
        status = clone(current.get("status") or {})
        status.update(observedGeneration=int(current["metadata"].get("generation", 1)),
                      replicas=replicas, updatedReplicas=updated, readyReplicas=ready,
                      availableReplicas=available,
                      unavailableReplicas=max(want - available, 0))
        for k in ("readyReplicas", "availableReplicas", "unavailableReplicas",
                  "updatedReplicas", "replicas"):
            if status.get(k) == 0:
                status.pop(k)  # omitempty, as the real status serialises
        now = rfc3339(self.store.clock())
        conds = status.get("conditions") or []
        if available >= want - max_unavailable:
            avail = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                     "message": "Deployment has minimum availability."}
        else:
            avail = {"type": "Available", "status": "False",
                     "reason": "MinimumReplicasUnavailable",
                     "message": "Deployment does not have minimum availability."}
        conds = set_condition(conds, avail, now, update_time=True)
        conds = self._progressing(current, conds, now, new, replicas=replicas,
                                  updated=updated, ready=ready, available=available)
        # Real order: Available first, then Progressing.
        conds.sort(key=lambda c: {"Available": 0, "Progressing": 1}.get(c.get("type", ""), 2))
        status["conditions"] = conds
        if status != current.get("status"):
            updated_obj = clone(current)
            updated_obj["status"] = status
            self.store.update(DEPLOYMENTS, updated_obj, subresource="status")
