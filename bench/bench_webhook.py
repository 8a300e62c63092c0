"""The eviction guard's cost and its hold time, on the lab, with the real install.

A lab of 3 GPU nodes; `kubectl apply -k deploy/controller` (two controller replicas as lab
pods); a 2-replica GPU Deployment that opts in (virtual pods). Printed:

1. Latency at a fixed rate of evictions per second (open loop, default 50/s for 10 s):
   - the webhook's own answer: AdmissionReview POSTs straight to a controller pod (HTTPS);
   - an eviction through the API server with the guard (API -> Service -> webhook), against
     its peer, the same eviction with no webhook configured, in the same run.
   The evictions are dry runs (the guard answers them without side effects; the budget is
   still checked), so the pods stay and every request does the same work.
2. Hold time: a real eviction retried every 0.2 s (a fast drainer), from the first 429 to
   the allowed eviction, beside the stand-in's start-up (created -> Ready) and the
   configured start-up. Needs the drain's surge engine in the build; skipped otherwise.

    python bench/bench_webhook.py [--rate 50] [--seconds 10] [--startup 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from controller.guardlab import (  # noqa: E402
    DEPLOY,
    guarded_deployment,
    kubectl,
    lab_path_env,
    pdb,
    ready_pods,
    until,
)
from drainsafe.lab.apiserver.discovery import BY_KEY  # noqa: E402
from drainsafe.lab.cluster import Lab  # noqa: E402

VWC = BY_KEY["admissionregistration.k8s.io/validatingwebhookconfigurations"]
PODS = BY_KEY["pods"]
CONNECTIONS = 32


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def open_loop(rate: float, seconds: float, send: Any) -> tuple[list[float], int]:
    """Start `send()` every 1/rate s for `seconds`; (latencies, failures)."""
    latencies: list[float] = []
    failures = 0

    async def one() -> None:
        nonlocal failures
        t = time.perf_counter()
        try:
            ok = await send()
        except (httpx.HTTPError, OSError):
            ok = False
        if ok:
            latencies.append(time.perf_counter() - t)
        else:
            failures += 1

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for i in range(int(rate * seconds)):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)
    return latencies, failures


def api_client(lab: Lab) -> httpx.AsyncClient:
    cp = lab.control_plane
    assert cp is not None
    return httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cp.ca_path)),
                             headers={"Authorization": f"Bearer {cp.token}"}, timeout=30,
                             limits=httpx.Limits(max_connections=64))


def eviction(pod: str, *, dry_run: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": pod, "namespace": "default"}}
    if dry_run:
        body["deleteOptions"] = {"dryRun": ["All"]}
    return body


def review_body(pod: str) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()),
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "subResource": "eviction", "name": pod, "namespace": "default",
                        "operation": "CREATE", "dryRun": True,
                        "object": eviction(pod, dry_run=True)}}


async def client_main(args: argparse.Namespace) -> None:
    """The load generator, in its own process so that it does not share the lab's CPU
    time and event loop: prints {"latencies": [...], "failed": n} as JSON."""
    pods = args.pods.split(",")
    verify: Any = False if args.mode == "direct" else ssl.create_default_context(
        cafile=args.ca)
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    # Long-lived connections, opened before the clock starts, as a drainer's client-go keeps
    # its (HTTP/2) connection: a pool that opens a new TLS connection whenever all are busy
    # turns a slow moment into a storm of handshakes in the lab's one Python process.
    async with httpx.AsyncClient(verify=verify, headers=headers, timeout=60,
                                 limits=httpx.Limits(max_connections=CONNECTIONS,
                                                     max_keepalive_connections=CONNECTIONS)
                                 ) as client:
        warm = args.url if args.mode == "direct" else f"{args.url}/version"
        await asyncio.gather(*(client.request("GET" if args.mode == "api" else "POST", warm,
                                              json=None if args.mode == "api"
                                              else review_body(pods[0]))
                               for _ in range(CONNECTIONS)))
        async def send() -> bool:
            pod = random.choice(pods)
            if args.mode == "direct":
                resp = await client.post(args.url, json=review_body(pod))
                return resp.status_code == 200
            resp = await client.post(
                f"{args.url}/api/v1/namespaces/default/pods/{pod}/eviction?dryRun=All",
                json=eviction(pod, dry_run=True))
            return resp.status_code == 201

        latencies, failed = await open_loop(args.rate, args.seconds, send)
    print(json.dumps({"latencies": latencies, "failed": failed}))


async def run_client(mode: str, url: str, pods: list[str], rate: float, seconds: float, *,
                     token: str = "", ca: str = "") -> tuple[list[float], int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, f"--client={mode}", f"--url={url}",
        f"--pods={','.join(pods)}", f"--rate={rate}", f"--seconds={seconds}",
        f"--token={token}", f"--ca={ca}",
        stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the load generator failed ({proc.returncode})")
    data = json.loads(out)
    return list(data["latencies"]), int(data["failed"])


async def latency(lab: Lab, rate: float, seconds: float) -> list[tuple[str, list[float], int]]:
    cp = lab.control_plane
    assert cp is not None
    pods = [p["metadata"]["name"] for p in ready_pods(lab, "llm")]
    controller = next(p for p in cp.store.items(PODS, "drainsafe-system")
                      if p.get("status", {}).get("podIP"))
    review_url = f"https://{controller['status']['podIP']}:8443/validate"
    api = {"token": cp.token, "ca": str(cp.ca_path)}
    rows = [("webhook answer (direct, HTTPS)",
             *await run_client("direct", review_url, pods, rate, seconds))]
    # The peer first (the configuration set aside), then the guard; each in a fresh client.
    saved = cp.store.get(VWC, "", "drainsafe-guard")
    cp.store.delete(VWC, "", "drainsafe-guard")
    calls = cp.api.webhooks.calls
    peer = ("eviction via API, no webhook (peer)",
            *await run_client("api", cp.url, pods, rate, seconds, **api))
    assert cp.api.webhooks.calls == calls
    saved["metadata"] = {"name": "drainsafe-guard"}
    cp.store.create(VWC, saved)
    rows.append(("eviction via API, guard installed",
                 *await run_client("api", cp.url, pods, rate, seconds, **api)))
    assert cp.api.webhooks.calls > calls, "the webhook was not called"
    rows.append(peer)
    return rows


async def hold_time(lab: Lab, startup: float) -> dict[str, float]:
    cp = lab.control_plane
    assert cp is not None
    await lab.apply(guarded_deployment("slow", replicas=2, startup=startup, gpus=0),
                    pdb("slow"))
    await lab.wait_available("default", "slow", timeout=60)
    victim = ready_pods(lab, "slow")[0]["metadata"]["name"]
    before = {p["metadata"]["name"] for p in cp.store.items(PODS, "default")}
    first_429 = allowed = None
    async with api_client(lab) as client:
        while allowed is None:
            resp = await client.post(
                f"{cp.url}/api/v1/namespaces/default/pods/{victim}/eviction",
                json=eviction(victim, dry_run=False))
            now = time.monotonic()
            if resp.status_code == 429 and first_429 is None:
                first_429 = now
            elif resp.status_code == 201:
                allowed = now
            elif resp.status_code != 429:
                raise RuntimeError(f"unexpected answer {resp.status_code}: {resp.text}")
            await asyncio.sleep(0.2)
    assert first_429 is not None
    stand_ins = [p for p in cp.store.items(PODS, "default")
                 if p["metadata"]["name"] not in before
                 and (p["metadata"].get("labels") or {}).get("app") == "slow"]
    startups = []
    for p in stand_ins:
        ready = next((c["lastTransitionTime"] for c in p["status"].get("conditions") or []
                      if c["type"] == "Ready" and c["status"] == "True"), None)
        if ready:
            startups.append(_t(ready) - _t(p["metadata"]["creationTimestamp"]))
    return {"hold": allowed - first_429,
            "stand_in_startup": min(startups) if startups else float("nan")}


def _t(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--startup", type=float, default=3.0)
    parser.add_argument("--client", choices=("direct", "api"), dest="mode",
                        help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pods", help=argparse.SUPPRESS)
    parser.add_argument("--token", default="", help=argparse.SUPPRESS)
    parser.add_argument("--ca", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        await client_main(args)
        return
    os.environ["PATH"] = lab_path_env()
    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        async with Lab(Path(tmp) / "lab", nodes=3, gpus_per_node=1, propagation_seconds=0.2,
                       ingress=False) as lab:
            code, out = await kubectl(lab, "1.33", "apply", "-k", str(DEPLOY))
            if code:
                raise SystemExit(out)
            await lab.wait_available("drainsafe-system", "drainsafe-controller", timeout=90)
            assert lab.control_plane is not None
            store = lab.control_plane.store
            await until(lambda: bool((store.peek(VWC, "", "drainsafe-guard") or {})
                                     .get("webhooks", [{}])[0].get("clientConfig", {})
                                     .get("caBundle")), timeout=30, what="the caBundle")
            await lab.apply(guarded_deployment(replicas=2, startup=0.5), pdb())
            await lab.wait_available("default", "llm", timeout=60)
            rows = await latency(lab, args.rate, args.seconds)
            print(f"\nLatency at {args.rate:g} evictions/s for {args.seconds:g} s "
                  "(dry-run evictions; ms):")
            print(f"{'path':40} {'n':>5} {'p50':>7} {'p99':>7} {'max':>7} {'failed':>6}")
            for name, lat, failed in rows:
                print(f"{name:40} {len(lat):5d} {pct(lat, 0.5):7.1f} {pct(lat, 0.99):7.1f} "
                      f"{max(lat) * 1000:7.1f} {failed:6d}")
            hold = await hold_time(lab, args.startup)
            print(f"\nHold time (eviction retried every 0.2 s; stand-in start-up configured "
                  f"{args.startup:g} s):")
            print(f"  first 429 -> allowed eviction: {hold['hold']:6.2f} s")
            print(f"  stand-in created -> Ready:     {hold['stand_in_startup']:6.2f} s")
            print(f"  guard overhead:                {hold['hold'] - hold['stand_in_startup']:6.2f}"
                  " s")


if __name__ == "__main__":
    asyncio.run(main())
