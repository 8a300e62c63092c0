"""check reads StatefulSets and LeaderWorkerSets (lws v0.10.0) as it reads Deployments, and
finds where a group loses capacity: no budget, a budget that is not whole groups, workers
killed before their leader has drained."""

from __future__ import annotations

from pathlib import Path

from check_manifests import (
    SLEEP10,
    check,
    container,
    deployment,
    hpa,
    lws,
    of,
    pdb,
    rules,
    service,
    to_yaml,
)

from drainsafe.check.context import Context
from drainsafe.check.engine import run
from drainsafe.check.model import LWS_NAME_LABEL

LEADER = {"app": "llm", "role": "leader"}
UVICORN_90 = ["uvicorn", "app:app", "--timeout-graceful-shutdown", "90"]
LWT = ("spec", "leaderWorkerTemplate")


def leader_svc() -> dict[str, object]:
    return service("llm", selector=LEADER)


def group_pdb(**kw: object) -> dict[str, object]:
    return pdb("llm", selector={LWS_NAME_LABEL: "llm"}, **kw)  # type: ignore[arg-type]


def test_statefulset_is_read_like_a_deployment() -> None:
    sts = deployment(kind="StatefulSet", grace=60, containers=[container(
        command=UVICORN_90, pre_stop=SLEEP10)])
    found = check(sts, service(), pdb())
    assert rules(found) == {"grace-budget"}
    assert of(found, "grace-budget")[0].object.kind == "StatefulSet"


def test_leader_grace_budget_is_judged_on_the_leader_template() -> None:
    found = check(lws(leader_grace=60, worker_grace=200,
                      leader=[container(command=UVICORN_90, pre_stop=SLEEP10)]),
                  leader_svc(), group_pdb())
    [f] = of(found, "grace-budget")
    assert f.path == (*LWT, "leaderTemplate", "spec", "terminationGracePeriodSeconds")
    assert f.object.kind == "LeaderWorkerSet" and f.object.name == "llm"


def test_worker_rules_are_judged_on_the_worker_template() -> None:
    # A Service over every pod of the set routes to workers too: they need a drain delay.
    found = check(lws(), service("llm", selector={"app": "llm"}), group_pdb())
    paths = {f.path[:4] for f in of(found, "prestop-missing")}
    assert paths == {(*LWT, "workerTemplate", "spec")}


def test_without_leader_template_the_worker_template_makes_every_pod() -> None:
    # groups x size pods all from workerTemplate: minAvailable of all four is a wedge.
    found = check(lws(leader_template=False, workers=[container(pre_stop=SLEEP10)]),
                  service("llm", selector={"app": "llm"}), group_pdb(min_available=4))
    assert "pdb-wedge" in rules(found)
    clean = check(lws(leader_template=False, workers=[container(pre_stop=SLEEP10)]),
                  service("llm", selector={"app": "llm"}), group_pdb(min_available=2))
    assert "pdb-wedge" not in rules(clean)


def test_lws_pdb_missing_by_restart_policy() -> None:
    for policy in (None, "RecreateGroupOnPodRestart", "RecreateGroupAfterStart"):
        found = check(lws(restart_policy=policy), leader_svc())
        [f] = of(found, "lws-pdb-missing")
        assert "RecreateGroup" in f.message
        assert "pdb-missing" not in rules(found)
    for policy in ("None", "Default"):
        assert "lws-pdb-missing" not in rules(check(lws(restart_policy=policy), leader_svc()))
    assert "lws-pdb-missing" not in rules(check(lws(), leader_svc(), group_pdb()))
    # A budget over the leaders only still selects the group's pods.
    assert "lws-pdb-missing" not in rules(check(lws(), leader_svc(), pdb("llm",
                                                                      selector=LEADER)))


def test_lws_pdb_partial_group() -> None:
    def partial(**kw: object) -> list[str]:
        found = check(lws(groups=3, size=4), leader_svc(), group_pdb(**kw))
        return [str(f.edits) for f in of(found, "lws-pdb-partial-group")]

    assert len(partial(max_unavailable=6)) == 1  # 1 group and 2 pods
    assert "value=4" in partial(max_unavailable=6)[0]
    assert "value=8" in partial(min_available=6)[0]  # 12 - 6 allowed: keep 2 groups
    assert partial(max_unavailable=4) == []
    assert partial(min_available=8) == []
    assert partial(max_unavailable=1) == []  # one eviction at a time: the tightest there is
    # Not counted in groups when the set restarts single pods.
    found = check(lws(groups=3, size=4, restart_policy="None"), leader_svc(),
                  group_pdb(max_unavailable=6))
    assert "lws-pdb-partial-group" not in rules(found)


def test_lws_worker_grace() -> None:
    leader = [container(command=UVICORN_90, pre_stop=SLEEP10)]
    found = check(lws(leader=leader, leader_grace=120, worker_grace=60), leader_svc(),
                  group_pdb())
    [f] = of(found, "lws-worker-grace")
    assert f.path == (*LWT, "workerTemplate", "spec", "terminationGracePeriodSeconds")
    assert f.budget is not None and f.budget.required == 105  # 10 + 90 + 5
    assert f.edits and f.edits[0].value == 105
    assert "grace-budget" not in rules(found)  # the leader's own budget fits
    # The workers' default 30 s is counted too.
    assert of(check(lws(leader=leader, leader_grace=120), leader_svc(), group_pdb()),
              "lws-worker-grace")
    assert not of(check(lws(leader=leader, leader_grace=120, worker_grace=105), leader_svc(),
                        group_pdb()), "lws-worker-grace")
    capped = check(lws(leader=leader, leader_grace=120, worker_grace=60), leader_svc(),
                   group_pdb(), max_grace_seconds=100)
    assert of(capped, "lws-worker-grace")[0].edits == ()


def test_ignore_annotation_on_the_set() -> None:
    obj = lws(restart_policy=None)
    obj["metadata"]["annotations"] = {"drainsafe.io/ignore": "lws-pdb-missing"}  # type: ignore[index]
    assert "lws-pdb-missing" not in rules(check(obj, leader_svc()))



def test_group_size_below_one_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "lws.yaml"
    path.write_text(to_yaml(lws(size=0), leader_svc(), group_pdb()))
    result = run([str(path)], Context())
    assert any("leaderWorkerTemplate.size" in e.message for e in result.errors)



def test_hpa_on_a_set_scales_groups() -> None:
    # minReplicas 2 groups of 4 is 8 pods at the minimum: 80 % keeps 7 and lets one go, and
    # minAvailable 8 wedges. Counting each template as 2 replicas (4 pods) would wedge both.
    scaler = hpa("llm", min_replicas=2)
    scaler["spec"]["scaleTargetRef"] = {  # type: ignore[index]
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "llm"}
    fits = check(lws(groups=3, size=4), leader_svc(), group_pdb(min_available="80%"), scaler)
    assert "pdb-wedge" not in rules(fits)
    wedged = check(lws(groups=3, size=4), leader_svc(), group_pdb(min_available=8), scaler)
    assert "pdb-wedge" in rules(wedged)
    assert "pdb-wedge" not in rules(check(lws(groups=3, size=4), leader_svc(),
                                          group_pdb(min_available=8)))
