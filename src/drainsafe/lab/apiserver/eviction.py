"""The server side of an eviction: the lab API server's pods/eviction subresource.

It answers what a client sends; drainsafe's own client side (sending evictions, reading
the answers, retrying) is drainsafe.drain.evict, which never imports this module.

Follows kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create,
checkAndDecrement, canIgnorePDB, getPodDisruptionBudgets, addConditionAndDeletePod;
read at sanposhiho/kubernetes@059ce4e, which has the unhealthyPodEvictionPolicy branch):

1. name in URL must equal the Eviction's metadata.name (400); dryRun in the query and
   in deleteOptions must agree (400, propagateDryRun).
2. Pending, Succeeded, Failed or already terminating pods are deleted without a budget
   check (canIgnorePDB, via drainsafe.pdb.eviction_bypasses_budget).
3. PDBs in the pod's namespace whose non-empty selector matches the pod are found; more
   than one: a Failure Status with code 500 returned as the *result*, not as an error
   ("This pod has more than one PodDisruptionBudget, ..."). The create handler
   (apiserver pkg/endpoints/handlers/create.go: `code := http.StatusCreated`, and a returned
   Status keeps its own Code) writes it with HTTP 201 (responsewriters.WriteObjectNegotiated
   uses the handler's code), so on the wire it is 201 with a Failure body; client-go turns
   any Failure Status body into an error whatever the HTTP code, which is what kubectl sees.
4. A not-Ready pod is deleted without using the budget when the policy is AlwaysAllow, or
   when currentHealthy >= desiredHealthy > 0 (IfHealthyBudget); that delete carries a
   resourceVersion precondition and a conflict on it becomes the "still being processed"
   429.
5. checkAndDecrement: observedGeneration < generation -> 429 "still being processed"
   (Retry-After 10); disruptionsAllowed < 0 -> 403; more than 2000 disruptedPods -> 403;
   disruptionsAllowed == 0 -> 429 with the DisruptionBudget cause "The disruption budget
   X needs N healthy pods and has M currently"; otherwise decrement and record
   status.disruptedPods[pod] = now (not on dry run).
6. The pod gets the DisruptionTarget condition (reason EvictionByEvictionAPI), then is
   deleted as by DELETE with the Eviction's deleteOptions; the result is 201 Success.
"""

from __future__ import annotations

from typing import Any

from drainsafe import pdb as pdbmath
from drainsafe.kube.objects import is_ready, rfc3339
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Obj, Store, clone
from drainsafe.labels import SelectorError, from_label_selector

PODS = BY_KEY["pods"]
PDBS = BY_KEY["policy/poddisruptionbudgets"]
MAX_DISRUPTED_PODS = 2000
EVICTION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = ("This pod has more than one PodDisruptionBudget, which the eviction "
                 "subresource does not support.")


def matching_budgets(store: Store, pod: Obj) -> list[Obj]:
    """PDBs whose selector matches the pod; an empty selector matches nothing here."""
    ns = pod["metadata"]["namespace"]
    out = []
    for budget in store.items(PDBS, ns):
        try:
            selector = from_label_selector(budget.get("spec", {}).get("selector"))
        except SelectorError:
            continue
        if selector.empty or not selector.matches(pod["metadata"].get("labels")):
            continue
        out.append(budget)
    return sorted(out, key=lambda b: str(b["metadata"]["name"]))


def too_many_requests_still_processing(name: str) -> st.StatusError:
    return st.StatusError(429, "TooManyRequests", EVICTION_MESSAGE, details={"causes": [{
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {name} is still being processed by the server.",
    }]}, retry_after=10)


def _dry_run(body: dict[str, Any], query_dry_run: bool) -> tuple[dict[str, Any], bool]:
    opts = body.get("deleteOptions") or {}
    if not isinstance(opts, dict):
        raise st.bad_request("deleteOptions must be an object")
    in_body = opts.get("dryRun") or []
    in_query = ["All"] if query_dry_run else []
    if in_body and in_query and in_body != in_query:
        raise st.bad_request(f"Non-matching dry-run options in request and content: "
                             f"{in_query} and {in_body}")
    return opts, bool(in_body or in_query)


def check_request(name: str, body: dict[str, Any], *, query_dry_run: bool = False
                  ) -> tuple[dict[str, Any], bool]:
    """The checks EvictionREST.Create makes before admission: (deleteOptions, dry run)."""
    if body.get("kind") not in (None, "Eviction"):
        raise st.bad_request(f"not a Eviction object: {body.get('kind')}")
    if (body.get("metadata") or {}).get("name") != name:
        raise st.bad_request("name in URL does not match name in Eviction object")
    return _dry_run(body, query_dry_run)


def evict(store: Store, namespace: str, name: str, body: dict[str, Any], *,
          query_dry_run: bool = False) -> tuple[int, dict[str, Any]]:
    """Handle POST pods/{name}/eviction; returns (HTTP code, body) or raises StatusError.

    Validating admission (drainsafe.lab.apiserver.admission_webhook) runs before this, after
    check_request, as createValidation does at the start of EvictionREST.Create.
    """
    opts, dry_run = check_request(name, body, query_dry_run=query_dry_run)
    preconditions = dict(opts.get("preconditions") or {})
    pod = store.get(PODS, namespace, name)
    phase = pod.get("status", {}).get("phase", "Pending")
    terminating = bool(pod["metadata"].get("deletionTimestamp"))
    if pdbmath.eviction_bypasses_budget(phase=phase, terminating=terminating):
        if (phase not in ("Succeeded", "Failed") and not terminating
                and not preconditions.get("resourceVersion")):
            preconditions["resourceVersion"] = pod["metadata"]["resourceVersion"]
        _condition_and_delete(store, pod, opts, preconditions, dry_run)
        return 201, st.success(201)

    budgets = matching_budgets(store, pod)
    if len(budgets) > 1:
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                     "status": "Failure", "message": MULTIPLE_PDBS, "code": 500}
    guard_rv = False
    if budgets:
        budget = budgets[0]
        bstatus = budget.get("status") or {}
        spec = pdbmath.PdbSpec.from_manifest(budget.get("spec") or {})
        healthy_bypass = False
        if not is_ready(pod):
            desired = int(bstatus.get("desiredHealthy", 0))
            current = int(bstatus.get("currentHealthy", 0))
            if spec.unhealthy_pod_eviction_policy == "AlwaysAllow" or (
                    current >= desired and desired > 0):
                healthy_bypass = True
        if healthy_bypass:
            guard_rv = True
        else:
            _check_and_decrement(store, budget, name, dry_run)
    if guard_rv and not preconditions.get("resourceVersion"):
        preconditions["resourceVersion"] = pod["metadata"]["resourceVersion"]
        try:
            _condition_and_delete(store, pod, opts, preconditions, dry_run)
        except st.StatusError as err:
            if err.code == 409:
                raise too_many_requests_still_processing(
                    str(budgets[0]["metadata"]["name"])) from None
            raise
    else:
        _condition_and_delete(store, pod, opts, preconditions, dry_run)
    return 201, st.success(201)


def _check_and_decrement(store: Store, budget: Obj, pod_name: str, dry_run: bool) -> None:
    name = str(budget["metadata"]["name"])
    bstatus = budget.get("status") or {}
    if int(bstatus.get("observedGeneration", 0)) < int(budget["metadata"].get("generation", 1)):
        raise too_many_requests_still_processing(name)
    allowed = int(bstatus.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise st.StatusError(403, "Forbidden", f'poddisruptionbudgets.policy "{name}" is '
                             "forbidden: pdb disruptions allowed is negative",
                             details={"name": name, "group": "policy",
                                      "kind": "poddisruptionbudgets"})
    if len(bstatus.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise st.StatusError(403, "Forbidden", f'poddisruptionbudgets.policy "{name}" is '
                             "forbidden: DisruptedPods map too big - too many evictions not "
                             "confirmed by PDB controller",
                             details={"name": name, "group": "policy",
                                      "kind": "poddisruptionbudgets"})
    if allowed == 0:
        raise st.StatusError(429, "TooManyRequests", EVICTION_MESSAGE, details={"causes": [{
            "reason": "DisruptionBudget",
            "message": f"The disruption budget {name} needs "
                       f"{int(bstatus.get('desiredHealthy', 0))} healthy pods and has "
                       f"{int(bstatus.get('currentHealthy', 0))} currently",
        }]})
    if dry_run:
        return
    updated = clone(budget)
    ustatus = updated.setdefault("status", {})
    ustatus["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        _set_condition(ustatus, {"type": "DisruptionAllowed", "status": "False",
                                 "reason": "InsufficientPods", "message": ""}, store)
    disrupted = dict(ustatus.get("disruptedPods") or {})
    disrupted[pod_name] = rfc3339(store.clock())
    ustatus["disruptedPods"] = disrupted
    store.update(PDBS, updated, subresource="status")


def _set_condition(status: dict[str, Any], cond: dict[str, Any], store: Store) -> None:
    conds = [c for c in status.get("conditions") or [] if c.get("type") != cond["type"]]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == cond["type"]),
               None)
    cond = dict(cond)
    if old is not None and old.get("status") == cond["status"]:
        cond["lastTransitionTime"] = old.get("lastTransitionTime")
    else:
        cond["lastTransitionTime"] = rfc3339(store.clock())
    conds.append(cond)
    status["conditions"] = conds


def _condition_and_delete(store: Store, pod: Obj, opts: dict[str, Any],
                          preconditions: dict[str, Any], dry_run: bool) -> None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    if not dry_run:
        latest = store.get(PODS, ns, name)
        if preconditions.get("uid") and preconditions["uid"] != latest["metadata"]["uid"]:
            raise st.conflict("", "Pod", name,
                              f"the UID in the precondition ({preconditions['uid']}) does "
                              f"not match the UID in record ({latest['metadata']['uid']}). "
                              "The object might have been deleted and then recreated")
        rv = preconditions.get("resourceVersion")
        if rv and rv != latest["metadata"]["resourceVersion"]:
            raise st.conflict("", "Pod", name,
                              f"the ResourceVersion in the precondition ({rv}) does not "
                              "match the ResourceVersion in record "
                              f"({latest['metadata']['resourceVersion']}). The object might "
                              "have been modified")
        lstatus = latest.setdefault("status", {})
        _set_pod_condition(lstatus, store)
        updated = store.update(PODS, latest, subresource="status")
        if rv:
            preconditions = {**preconditions,
                             "resourceVersion": updated["metadata"]["resourceVersion"]}
    grace = opts.get("gracePeriodSeconds")
    store.delete(PODS, ns, name, grace_period=None if grace is None else int(grace),
                 preconditions=preconditions, propagation=opts.get("propagationPolicy"),
                 dry_run=dry_run)


def _set_pod_condition(status: dict[str, Any], store: Store) -> None:
    conds = status.get("conditions") or []
    for c in conds:
        if c.get("type") == "DisruptionTarget":
            if c.get("status") != "True":
                c.update(status="True", lastTransitionTime=rfc3339(store.clock()))
            c.update(reason="EvictionByEvictionAPI", message="Eviction API: evicting")
            return
    conds.append({"type": "DisruptionTarget", "status": "True",
                  "lastProbeTime": None,
                  "lastTransitionTime": rfc3339(store.clock()),
                  "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"})
    status["conditions"] = conds
