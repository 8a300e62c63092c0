"""Benchmark: the lab API server's list and watch throughput.

Seeds N pods (default 1,000) straight into the store of a real ControlPlane (HTTPS,
bearer token, uvicorn), then measures in one run, side by side:
- list: objects/s for GET /api/v1/pods (one page and 500-object pages) with httpx, with
  lightkube (the project's API client) and with the real `kubectl get pods -A -o json`
  (kubectl.1.33, the peer client; its time includes process start and discovery);
- watch: events/s delivered to an HTTP watcher (httpx streaming) while pods are
  modified in-process, next to the in-process store's own event rate (the ceiling);
- rollout: the controllers alone (kubelets emulated in-process, 10 ms per start/stop)
  creating a Deployment of --pods GPU pods on --nodes nodes, then a rollout restart.

Sections are functions in SECTIONS, so another section (e.g. a cluster rollout) can be
added without touching these. Figures are wall-clock on a shared machine: indicative.

    python bench/bench_lab.py                 # 1,000 pods
    python bench/bench_lab.py --pods 5000 --events 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable

import httpx

from drainsafe.kube.objects import rfc3339
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event
from drainsafe.lab.controlplane import ControlPlane

PODS = BY_KEY["pods"]
KUBECTL = pathlib.Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
Row = tuple[str, str, str]


def seed(cp: ControlPlane, count: int) -> None:
    for i in range(count):
        cp.store.create(PODS, {
            "metadata": {"name": f"bench-{i:05d}", "namespace": "default",
                         "labels": {"app": "bench", "shard": str(i % 10)}},
            "spec": {"schedulerName": "bench-none",  # keep the scheduler out of it
                     "containers": [{"name": "server", "image": "example/llm:1.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        })


def client(cp: ControlPlane) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=cp.url, timeout=120,
                             verify=ssl.create_default_context(cafile=cp.ca_path),
                             headers={"Authorization": f"Bearer {cp.token}"})


async def best_of(times: int, fn: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(times):
        t0 = time.perf_counter()
        count = await fn()
        best = min(best, time.perf_counter() - t0)
    return best, count


async def section_list(cp: ControlPlane, args: argparse.Namespace,
                       workdir: pathlib.Path) -> list[Row]:
    rows: list[Row] = []
    async with client(cp) as c:
        async def one_page() -> int:
            r = await c.get("/api/v1/pods")
            return len(r.json()["items"])

        async def pages() -> int:
            total, token = 0, None
            while True:
                params = {"limit": "500", **({"continue": token} if token else {})}
                body = (await c.get("/api/v1/pods", params=params)).json()
                total += len(body["items"])
                token = body["metadata"].get("continue")
                if not token:
                    return total

        for label, fn in (("list, httpx, one page", one_page),
                          ("list, httpx, limit=500 pages", pages)):
            secs, n = await best_of(3, fn)
            rows.append((label, f"{n / secs:,.0f} objects/s", f"{secs * 1000:.0f} ms"))

    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Pod

    kubeconfig = workdir / "kubeconfig"
    cp.write_kubeconfig(kubeconfig)
    lk = AsyncClient(config=KubeConfig.from_file(str(kubeconfig)))
    try:
        async def lightkube_list() -> int:
            return len([p async for p in lk.list(Pod, namespace="*")])

        secs, n = await best_of(3, lightkube_list)
        rows.append(("list, lightkube (typed models)", f"{n / secs:,.0f} objects/s",
                     f"{secs * 1000:.0f} ms"))
    finally:
        await lk.close()

    if KUBECTL.exists():
        async def kubectl_list() -> int:
            proc = await asyncio.create_subprocess_exec(
                str(KUBECTL), f"--kubeconfig={kubeconfig}", f"--cache-dir={workdir}/cache",
                "get", "pods", "-A", "-o", "json", stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL)
            out, _ = await proc.communicate()
            return len(json.loads(out)["items"])

        secs, n = await best_of(2, kubectl_list)
        rows.append(("list, peer: kubectl.1.33 get pods -A -o json", f"{n / secs:,.0f} objects/s",
                     f"{secs * 1000:.0f} ms"))
    return rows


def bump(cp: ControlPlane, i: int, count: int) -> None:
    name = f"bench-{i % count:05d}"
    obj = cp.store.get(PODS, "default", name)
    obj["metadata"].setdefault("annotations", {})["bench/seq"] = str(i)
    cp.store.update(PODS, obj)


async def section_watch(cp: ControlPlane, args: argparse.Namespace,
                        workdir: pathlib.Path) -> list[Row]:
    n = args.events
    # ceiling: the store alone (update + history + fan-out to one in-process watcher)
    w = cp.store.watch(PODS, cp.store.resource_version)
    t0 = time.perf_counter()
    for i in range(n):
        bump(cp, i, args.pods)
    store_secs = time.perf_counter() - t0
    cp.store.unwatch(w)
    rows: list[Row] = [("watch, in-process store (ceiling)", f"{n / store_secs:,.0f} events/s",
                        f"{store_secs * 1000:.0f} ms")]

    async with client(cp) as c:
        start_rv = str(cp.store.resource_version)
        received = 0
        done = asyncio.Event()

        async def consume() -> None:
            nonlocal received
            async with c.stream("GET", "/api/v1/pods", params={
                    "watch": "true", "resourceVersion": start_rv}) as resp:
                async for line in resp.aiter_lines():
                    if line:
                        received += 1
                        if received >= n:
                            done.set()
                            return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)  # let the watch connect
        t0 = time.perf_counter()
        for i in range(n):
            bump(cp, i, args.pods)
            if i % 200 == 0:
                await asyncio.sleep(0)  # let the server write while we produce
        async with asyncio.timeout(300):
            await done.wait()
        secs = time.perf_counter() - t0
        task.cancel()
        rows.append(("watch, HTTPS stream to httpx", f"{n / secs:,.0f} events/s",
                     f"{secs * 1000:.0f} ms"))
    return rows


def kubelet_in_process(cp: ControlPlane) -> Callable[[], None]:
    """Marks bound pods Running+Ready and finishes terminating ones, in-process, so the
    rollout section times the control plane alone (the node side's bench runs real
    kubelets)."""
    loop = asyncio.get_running_loop()
    counter = iter(range(10**9))

    def start(ns: str, name: str) -> None:
        pod = cp.store.peek(PODS, ns, name)
        if pod is None or pod.get("status", {}).get("phase") != "Pending":
            return
        pod = cp.store.get(PODS, ns, name)
        n = next(counter)
        pod["status"].update(phase="Running", podIP=f"127.1.{n // 250 % 250}.{n % 250 + 2}",
                             conditions=[{"type": "Ready", "status": "True",
                                          "lastTransitionTime": rfc3339(time.time())}])
        cp.store.update(PODS, pod, subresource="status")

    def finish(ns: str, name: str) -> None:
        if cp.store.peek(PODS, ns, name) is not None:
            cp.store.delete(PODS, ns, name, grace_period=0)

    def on_event(ev: Event) -> None:
        if ev.resource != "pods" or ev.type == "DELETED":
            return
        m = ev.obj["metadata"]
        if m.get("deletionTimestamp"):
            loop.call_later(0.01, finish, m["namespace"], m["name"])
        elif ev.obj["spec"].get("nodeName") and ev.obj.get("status", {}).get(
                "phase") == "Pending":
            loop.call_later(0.01, start, m["namespace"], m["name"])

    return cp.store.listen(on_event)


async def section_rollout(cp: ControlPlane, args: argparse.Namespace,
                          workdir: pathlib.Path) -> list[Row]:
    """A Deployment of --pods replicas on --nodes nodes: create, then rollout restart."""
    nodes = BY_KEY["nodes"]
    deployments = BY_KEY["apps/deployments"]
    gpus = -(-args.pods * 2 // args.nodes)  # room for the 25 % surge
    for i in range(args.nodes):
        cp.store.create(nodes, {"metadata": {"name": f"gpu-{i:03d}"}, "spec": {}})
        node = cp.store.get(nodes, "", f"gpu-{i:03d}")
        node["status"] = {"allocatable": {"cpu": "96", "memory": "1Ti", "pods": "250",
                                          "nvidia.com/gpu": str(gpus)},
                          "conditions": [{"type": "Ready", "status": "True"}]}
        cp.store.update(nodes, node, subresource="status")
    stop = kubelet_in_process(cp)
    try:
        cp.store.create(BY_KEY["services"], {
            "metadata": {"name": "serve", "namespace": "default"},
            "spec": {"selector": {"app": "serve"}, "ports": [{"port": 80}]}})
        t0 = time.perf_counter()
        cp.store.create(deployments, {
            "metadata": {"name": "serve", "namespace": "default"},
            "spec": {"replicas": args.pods, "selector": {"matchLabels": {"app": "serve"}},
                     "template": {"metadata": {"labels": {"app": "serve"}}, "spec": {
                         "containers": [{"name": "c", "image": "example/llm:1.0",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
        await _rolled_out(cp, args.pods, "1")
        created = time.perf_counter() - t0
        t0 = time.perf_counter()
        cp.store.mutate(deployments, "default", "serve", lambda d: d["spec"]["template"][
            "metadata"].setdefault("annotations", {}).update(
            {"kubectl.kubernetes.io/restartedAt": rfc3339(time.time())}))
        await _rolled_out(cp, args.pods, "2")
        restarted = time.perf_counter() - t0
    finally:
        stop()
    label = f"{args.pods:,} pods on {args.nodes} nodes"
    return [(f"rollout: create, {label}", f"{args.pods / created:,.0f} pods/s",
             f"{created * 1000:.0f} ms"),
            (f"rollout: restart (25%/25%), {label}", f"{args.pods / restarted:,.0f} pods/s",
             f"{restarted * 1000:.0f} ms")]


async def _rolled_out(cp: ControlPlane, replicas: int, revision: str) -> None:
    deployments = BY_KEY["apps/deployments"]
    done = asyncio.Event()

    def check(_ev: Event | None = None) -> None:
        d = cp.store.peek(deployments, "default", "serve")
        s = (d or {}).get("status") or {}
        if (d is not None and (d["metadata"].get("annotations") or {}).get(
                "deployment.kubernetes.io/revision") == revision
                and s.get("observedGeneration") == d["metadata"].get("generation")
                and s.get("updatedReplicas") == replicas == s.get("availableReplicas")
                and s.get("replicas") == replicas):
            done.set()

    stop = cp.store.listen(check)
    try:
        check()
        async with asyncio.timeout(600):
            await done.wait()
    finally:
        stop()


SECTIONS: list[tuple[str, Callable[[ControlPlane, argparse.Namespace, pathlib.Path],
                                   Awaitable[list[Row]]]]] = [
    ("list", section_list),
    ("watch", section_watch),
    ("rollout", section_rollout),
]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-lab-") as tmp:
        workdir = pathlib.Path(tmp)
        cp = ControlPlane(workdir / "state", history=max(args.events * 3, 10_000))
        await cp.start()
        try:
            seed(cp, args.pods)
            print(f"drainsafe lab API server: {args.pods:,} pods, {args.events:,} watch events")
            print(f"{'measure':52} {'throughput':>20} {'time':>10}")
            for name, fn in SECTIONS:
                if args.only and name not in args.only:
                    continue
                for label, rate, took in await fn(cp, args, workdir):
                    print(f"{label:52} {rate:>20} {took:>10}")
        finally:
            await cp.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=100, help="nodes for the rollout section")
    parser.add_argument("--only", nargs="*", help="sections to run (list, watch, rollout)")
    asyncio.run(main(parser.parse_args()))
