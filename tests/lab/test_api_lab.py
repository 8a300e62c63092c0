"""The lab API server over real HTTPS: auth, Status bodies, CRUD, patches, lists, logs."""

from __future__ import annotations

import asyncio
import json
import pathlib
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest

from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.node.volumes import pod_dir

PODS = BY_KEY["pods"]


def trust(cp: ControlPlane) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cp.ca_path)


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
            base_url=control_plane.url, verify=trust(control_plane),
            headers={"Authorization": f"Bearer {control_plane.token}"}, timeout=10) as c:
        yield c


def pod(name: str, *, node: str | None = None, labels: dict | None = None,
        grace: int | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x:1",
                                  "ports": [{"name": "http", "containerPort": 8000}]}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": "t"}}, "spec": spec}


async def test_requests_without_the_token_get_401_status(control_plane: ControlPlane) -> None:
    async with httpx.AsyncClient(base_url=control_plane.url, verify=trust(control_plane)) as c:
        r = await c.get("/api/v1/pods")
        assert r.status_code == 401
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": "Unauthorized",
                            "reason": "Unauthorized", "code": 401}
        assert (await c.get("/version")).json()["major"] == "1"


async def test_not_found_and_conflict_status_bodies(api: httpx.AsyncClient) -> None:
    r = await api.get("/api/v1/namespaces/default/pods/nope")
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": 'pods "nope" not found',
                        "reason": "NotFound", "details": {"name": "nope", "kind": "pods"},
                        "code": 404}
    r = await api.get("/apis/apps/v1/namespaces/default/deployments/nope")
    assert r.json()["message"] == 'deployments.apps "nope" not found'

    created = (await api.post("/api/v1/namespaces/default/pods", json=pod("p1"))).json()
    assert created["status"]["phase"] == "Pending"
    r = await api.post("/api/v1/namespaces/default/pods", json=pod("p1"))
    assert r.status_code == 409 and r.json()["reason"] == "AlreadyExists"

    stale = dict(created, metadata=dict(created["metadata"], labels={"app": "x"}))
    await api.put("/api/v1/namespaces/default/pods/p1", json=stale)
    r = await api.put("/api/v1/namespaces/default/pods/p1", json=stale)
    assert r.status_code == 409
    assert r.json()["reason"] == "Conflict"
    assert "the object has been modified" in r.json()["message"]

    r = await api.post("/api/v1/namespaces/nowhere/pods", json=pod("p2"))
    assert r.status_code == 404 and r.json()["message"] == 'namespaces "nowhere" not found'
    r = await api.post("/api/v1/namespaces/default/pods", content=b"{not json")
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"


async def test_resource_versions_generation_and_status_split(api: httpx.AsyncClient) -> None:
    d = {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web"},
         "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    created = (await api.post("/apis/apps/v1/namespaces/default/deployments", json=d)).json()
    assert created["metadata"]["generation"] == 1
    assert created["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%",
                                                            "maxUnavailable": "25%"}
    rv1 = int(created["metadata"]["resourceVersion"])
    r = await api.patch("/apis/apps/v1/namespaces/default/deployments/web",
                        json={"spec": {"replicas": 0}},
                        headers={"content-type": "application/merge-patch+json"})
    assert int(r.json()["metadata"]["resourceVersion"]) >= rv1  # no-op: no new version
    r = await api.patch("/apis/apps/v1/namespaces/default/deployments/web",
                        json={"metadata": {"labels": {"team": "ml"}}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.json()["metadata"]["generation"] == 1  # metadata only
    r = await api.patch("/apis/apps/v1/namespaces/default/deployments/web/scale",
                        json={"spec": {"replicas": 2}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.json()["kind"] == "Scale" and r.json()["spec"]["replicas"] == 2
    got = (await api.get("/apis/apps/v1/namespaces/default/deployments/web")).json()
    assert got["metadata"]["generation"] == 2
    # a main-resource write cannot change status; a status write cannot change spec
    for _ in range(10):  # the deployment controller writes too: retry on 409 like clients
        got = (await api.get("/apis/apps/v1/namespaces/default/deployments/web")).json()
        got["status"] = {"replicas": 99}
        got["spec"]["replicas"] = 1
        r = await api.put("/apis/apps/v1/namespaces/default/deployments/web", json=got)
        if r.status_code != 409:
            break
    put = r.json()
    assert r.status_code == 200, put
    assert put["status"].get("replicas") != 99 and put["spec"]["replicas"] == 1


async def test_patch_flavours(api: httpx.AsyncClient) -> None:
    await api.post("/api/v1/namespaces/default/pods", json=pod("p"))
    url = "/api/v1/namespaces/default/pods/p"
    r = await api.patch(url, content=json.dumps({"spec": {"containers": [
        {"name": "c", "image": "x:2"}, {"name": "side", "image": "s:1"}]}}),
        headers={"content-type": "application/strategic-merge-patch+json"})
    containers = r.json()["spec"]["containers"]
    assert [c["name"] for c in containers] == ["c", "side"]
    assert containers[0]["image"] == "x:2" and containers[0]["ports"][0]["containerPort"] == 8000
    r = await api.patch(url, content=json.dumps([
        {"op": "add", "path": "/metadata/labels/tier", "value": "gpu"},
        {"op": "remove", "path": "/metadata/labels/app"}]),
        headers={"content-type": "application/json-patch+json"})
    assert r.json()["metadata"]["labels"] == {"tier": "gpu"}
    r = await api.patch(url, content=json.dumps({"metadata": {"labels": {"tier": None}}}),
                        headers={"content-type": "application/merge-patch+json"})
    assert "tier" not in (r.json()["metadata"].get("labels") or {})
    r = await api.patch(url, content=json.dumps({"metadata": {"resourceVersion": "1"}}),
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 409
    r = await api.patch(url, content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 415


async def test_list_limit_continue_and_selectors(api: httpx.AsyncClient,
                                                 control_plane: ControlPlane) -> None:
    for i in range(5):
        await api.post("/api/v1/namespaces/default/pods",
                       json=pod(f"p{i}", node="n1" if i % 2 else None,
                                labels={"app": "t", "idx": str(i)}))
    names: list[str] = []
    token = None
    pages = 0
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        body = (await api.get("/api/v1/namespaces/default/pods", params=params)).json()
        names += [p["metadata"]["name"] for p in body["items"]]
        pages += 1
        token = body["metadata"].get("continue")
        if not token:
            break
    assert names == [f"p{i}" for i in range(5)] and pages == 3
    r = await api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=n1"})
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["p1", "p3"]
    r = await api.get("/api/v1/pods", params={"labelSelector": "idx in (0,4),app=t"})
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["p0", "p4"]
    r = await api.get("/api/v1/pods", params={
        "fieldSelector": "metadata.name!=p0,status.phase=Pending,metadata.namespace=default"})
    assert [p["metadata"]["name"] for p in r.json()["items"]] == ["p1", "p2", "p3", "p4"]
    r = await api.get("/api/v1/pods", params={"continue": "garbage"})
    assert r.status_code == 400


async def test_dry_run_graceful_deletion_and_garbage_collection(
        api: httpx.AsyncClient, control_plane: ControlPlane) -> None:
    r = await api.post("/api/v1/namespaces/default/pods?dryRun=All", json=pod("dry"))
    assert r.status_code == 201
    assert (await api.get("/api/v1/namespaces/default/pods/dry")).status_code == 404

    # an unscheduled pod has no kubelet to wait for: it goes at once
    await api.post("/api/v1/namespaces/default/pods", json=pod("pending"))
    await api.delete("/api/v1/namespaces/default/pods/pending")
    assert (await api.get("/api/v1/namespaces/default/pods/pending")).status_code == 404

    # a scheduled pod gets deletionTimestamp + grace and waits for its kubelet
    await api.post("/api/v1/namespaces/default/pods", json=pod("bound", node="n1", grace=60))
    r = await api.delete("/api/v1/namespaces/default/pods/bound")
    # 200 with the object, which stays until its kubelet is done (delete.go answers 202
    # only for orphanDependents=false)
    assert r.status_code == 200
    meta = r.json()["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 60 and meta["deletionTimestamp"]
    # a longer grace cannot extend it; a shorter one shortens it
    r = await api.delete("/api/v1/namespaces/default/pods/bound",
                         params={"gracePeriodSeconds": "90"})
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 60
    r = await api.request("DELETE", "/api/v1/namespaces/default/pods/bound",
                          json={"gracePeriodSeconds": 5})
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 5
    # the kubelet's final delete
    r = await api.delete("/api/v1/namespaces/default/pods/bound",
                         params={"gracePeriodSeconds": "0"})
    assert r.status_code == 200
    assert (await api.get("/api/v1/namespaces/default/pods/bound")).status_code == 404

    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
          "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}},
                   "template": {"metadata": {"labels": {"app": "rs"}},
                                "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    await api.post("/apis/apps/v1/namespaces/default/replicasets", json=rs)
    from conftest import wait_until

    def rs_pods() -> list[dict]:
        return [p for p in control_plane.store.items(PODS, "default")
                if (p["metadata"].get("labels") or {}).get("app") == "rs"]

    await wait_until(control_plane, lambda: len(rs_pods()) == 2, what="2 rs pods")
    await api.delete("/apis/apps/v1/namespaces/default/replicasets/rs",
                     params={"propagationPolicy": "Orphan"})
    assert len(rs_pods()) == 2
    assert all(not p["metadata"].get("ownerReferences") for p in rs_pods())

    rs["metadata"]["name"] = "rs2"
    await api.post("/apis/apps/v1/namespaces/default/replicasets", json=rs)
    await wait_until(control_plane, lambda: len(rs_pods()) == 4, what="4 rs pods")
    await api.delete("/apis/apps/v1/namespaces/default/replicasets/rs2")
    assert len(rs_pods()) == 2  # background GC removed the owned (unscheduled) pods


async def test_services_get_stable_cluster_ips(api: httpx.AsyncClient) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}
    first = (await api.post("/api/v1/namespaces/default/services", json=svc)).json()
    ip = first["spec"]["clusterIP"]
    assert ip.startswith("127.96.") and first["spec"]["clusterIPs"] == [ip]
    assert first["spec"]["ports"][0]["protocol"] == "TCP"
    svc["metadata"]["name"] = "other"
    other = (await api.post("/api/v1/namespaces/default/services", json=svc)).json()
    assert other["spec"]["clusterIP"] != ip
    r = await api.patch("/api/v1/namespaces/default/services/web",
                        json={"metadata": {"labels": {"x": "y"}}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.json()["spec"]["clusterIP"] == ip
    r = await api.patch("/api/v1/namespaces/default/services/web",
                        json={"spec": {"clusterIP": "127.96.9.9"}},
                        headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 422 and r.json()["reason"] == "Invalid"


async def test_pod_log_is_served_from_the_state_dir(api: httpx.AsyncClient,
                                                    control_plane: ControlPlane) -> None:
    created = await api.post("/api/v1/namespaces/default/pods", json=pod("logger", node="n1"))
    r = await api.get("/api/v1/namespaces/default/pods/logger/log")
    assert r.status_code == 400 and "waiting to start" in r.json()["message"]
    log_dir = pod_dir(control_plane.state_dir, "default", "logger",
                      created.json()["metadata"]["uid"])
    log_dir.mkdir(parents=True)
    (log_dir / "c.log").write_text("one\ntwo\nthree\n")
    r = await api.get("/api/v1/namespaces/default/pods/logger/log")
    assert r.text == "one\ntwo\nthree\n"
    r = await api.get("/api/v1/namespaces/default/pods/logger/log", params={"tailLines": "1"})
    assert r.text == "three\n"
    # -f: new output streams until the pod is gone
    async with api.stream("GET", "/api/v1/namespaces/default/pods/logger/log",
                          params={"follow": "true", "tailLines": "0"}) as resp:
        chunks = resp.aiter_bytes()
        with (log_dir / "c.log").open("a") as fh:
            fh.write("four\n")
        got = b""
        while b"four" not in got:
            got += await asyncio.wait_for(chunks.__anext__(), 5)
        await api.delete("/api/v1/namespaces/default/pods/logger",
                         params={"gracePeriodSeconds": "0"})
        rest = [c async for c in chunks]
    assert got.strip() == b"four" and b"".join(rest) == b""


async def test_table_output_for_pods(api: httpx.AsyncClient) -> None:
    await api.post("/api/v1/namespaces/default/pods", json=pod("t1", node="n1"))
    r = await api.get("/api/v1/namespaces/default/pods", headers={
        "accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    table = r.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    assert table["rows"][0]["cells"][0] == "t1" and table["rows"][0]["cells"][6] == "n1"


async def test_lightkube_client_sees_eviction_errors_as_typed_status(
        control_plane: ControlPlane, cp_kubeconfig: pathlib.Path) -> None:
    """The project's API client (lightkube) against the lab: 429 carries the cause."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.core.exceptions import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    store = control_plane.store
    store.create(PODS, pod("guarded", node="n1", labels={"app": "web"}))
    running = store.get(PODS, "default", "guarded")
    running["status"] = {"phase": "Running", "conditions": [{"type": "Ready",
                                                             "status": "True"}]}
    store.update(PODS, running, subresource="status")
    store.create(BY_KEY["policy/poddisruptionbudgets"], {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    from conftest import wait_until

    await wait_until(control_plane, lambda: (store.peek(
        BY_KEY["policy/poddisruptionbudgets"], "default", "web") or {}).get(
        "status", {}).get("observedGeneration") == 1, what="PDB status")
    client = AsyncClient(config=KubeConfig.from_file(str(cp_kubeconfig)))
    try:
        with pytest.raises(ApiError) as err:
            await client.create(Pod.Eviction(metadata=ObjectMeta(name="guarded",
                                                                 namespace="default")),
                                name="guarded", namespace="default")
        status = err.value.status
        assert status.code == 429 and status.reason == "TooManyRequests"
        assert status.details.causes[0].reason == "DisruptionBudget"
        assert status.details.causes[0].message == (
            "The disruption budget web needs 1 healthy pods and has 1 currently")
        listed = [p async for p in client.list(Pod, namespace="default")]
        assert [p.metadata.name for p in listed] == ["guarded"]
    finally:
        await client.close()
