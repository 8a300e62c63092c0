"""`drainsafe controller`: the webhook server, the leader election and the reconciler.

Start-up, in order: the API client (the kubeconfig chain, else the pod's service account),
the shared serving certificate and its CA in the webhook configuration
(drainsafe.controller.serving), the informers, then HTTPS on `--port` for
`POST /validate` (AdmissionReview v1) and `/healthz`, `/readyz`, plain HTTP on
`--metrics-port` for `/metrics` (the guard's counters, and the maintenance facts:
drainsafe.controller.metrics), the Lease, and, under it, the NodeMaintenance reconciler
(drainsafe.controller.maintenance). SIGTERM stops accepting, hands the Lease
over and exits; a hold in flight is simply answered again by another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pathlib
import signal
import tempfile
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from drainsafe.controller.config import ControllerConfig
from drainsafe.controller.engine import load_engine
from drainsafe.controller.guard import Guard
from drainsafe.controller.leader import LeaderElector
from drainsafe.controller.maintenance import MaintenanceReconciler
from drainsafe.controller.metrics import MaintenanceCollector
from drainsafe.controller.serving import ensure_serving_cert, sync_ca_bundle
from drainsafe.kube import KubeClient, KubeError

log = logging.getLogger(__name__)
SERVICE_ACCOUNT = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")
CA_SYNC_SECONDS = 30.0
CA_RETRY_SECONDS = 2.0
SHUTDOWN_SECONDS = 5
"""How long a stop waits for the webhook server's connections: a review in flight is answered
from the caches, and the API server gives up on it after the webhook's timeoutSeconds anyway
(deploy/controller/webhook.yaml: 5). Unbounded, an idle keep-alive TLS connection held the
process until SIGKILL at the end of its grace period: closing it waits for the client's
close_notify (asyncio's SSL shutdown, up to 30 s), which a client that does not read an
idle connection never sends."""


def make_client() -> KubeClient:
    """The kubeconfig chain (KUBECONFIG, ~/.kube/config); in a pod without one, the
    service account, as client-go's InClusterConfig."""
    if os.environ.get("KUBECONFIG") or pathlib.Path("~/.kube/config").expanduser().exists() \
            or not (SERVICE_ACCOUNT / "token").exists():
        return KubeClient.from_kubeconfig()
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
           "clusters": [{"name": "in-cluster", "cluster": {
               "server": f"https://{host}:{port}",
               "certificate-authority": str(SERVICE_ACCOUNT / "ca.crt")}}],
           "users": [{"name": "sa", "user": {"tokenFile": str(SERVICE_ACCOUNT / "token")}}],
           "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster",
                                                           "user": "sa"}}]}
    path = pathlib.Path(tempfile.mkdtemp(prefix="drainsafe-")) / "kubeconfig"
    path.write_text(json.dumps(doc))
    return KubeClient.from_kubeconfig(str(path))


def webhook_app(guard: Guard, ready: asyncio.Event) -> Starlette:
    async def validate(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            return JSONResponse({"error": "not an AdmissionReview"}, status_code=400)
        return JSONResponse(await guard.review(body))

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        return PlainTextResponse("ok" if ready.is_set() else "starting",
                                 status_code=200 if ready.is_set() else 503)

    return Starlette(routes=[Route("/validate", validate, methods=["POST"]),
                             Route("/healthz", healthz), Route("/readyz", readyz)])


def metrics_app(guard: Guard) -> Starlette:
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(guard.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics)])


async def run(cfg: ControllerConfig) -> int:
    client = make_client()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = load_engine(client)
    elector = LeaderElector(client, cfg.namespace, cfg.lease, cfg.identity,
                            lease_seconds=cfg.lease_seconds, retry_seconds=cfg.retry_seconds)
    guard = Guard(client, cfg, engine=engine, elector=elector)
    cert = await ensure_serving_cert(client, cfg)
    tls_dir = pathlib.Path(tempfile.mkdtemp(prefix="drainsafe-tls-"))
    (tls_dir / "tls.crt").write_bytes(cert.cert_pem)
    key = tls_dir / "tls.key"
    key.touch(mode=0o600)
    key.write_bytes(cert.key_pem)
    await guard.start()
    ready = asyncio.Event()
    servers = [uvicorn.Server(uvicorn.Config(
        webhook_app(guard, ready), host=cfg.host, port=cfg.port, ssl_certfile=str(tls_dir /
        "tls.crt"), ssl_keyfile=str(key), log_level="warning", lifespan="off",
        timeout_graceful_shutdown=SHUTDOWN_SECONDS))]
    if cfg.metrics_port:
        servers.append(uvicorn.Server(uvicorn.Config(
            metrics_app(guard), host=cfg.host, port=cfg.metrics_port, log_level="warning",
            lifespan="off", timeout_graceful_shutdown=SHUTDOWN_SECONDS)))
    tasks = [asyncio.ensure_future(s._serve()) for s in servers]  # no signal capture

    async def keep_ca() -> None:
        # Often until the configuration exists and carries our CA, then now and then (in
        # case it is re-created from its manifest, which has no caBundle).
        while True:
            try:
                done = await sync_ca_bundle(client, cfg, cert.ca_pem)
            except KubeError as exc:
                log.warning("could not write the caBundle: %s", exc)
                done = False
            await asyncio.sleep(CA_SYNC_SECONDS if done else CA_RETRY_SECONDS)

    # NodeMaintenance (issue 30): the same leader, the same node informer as the guard.
    maintenance = MaintenanceReconciler(client, guard.view.nodes, events=guard.events)
    # Forgotten cordons and surges, computed at each scrape from the same caches.
    guard.metrics.registry.register(MaintenanceCollector(
        lambda: guard.view.maintenance_facts(maintenance.informer.cache.values())))
    tasks += [asyncio.ensure_future(elector.run()), asyncio.ensure_future(guard.run_reconciler()),
              asyncio.ensure_future(keep_ca()),
              asyncio.ensure_future(maintenance.run(elector, cfg.reconcile_seconds))]
    while not all(s.started for s in servers):
        if any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    ready.set()
    log.info("drainsafe controller %s serving on %s:%d", cfg.identity, cfg.host, cfg.port)
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception()), None)
    for s in servers:
        s.should_exit = True
    await elector.release()
    for t in tasks[len(servers):]:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    waiter.cancel()
    await guard.stop()
    with contextlib.suppress(Exception):
        await client.aclose()
    if failed is not None:
        exc: Any = failed.exception()
        log.error("drainsafe controller stopped: %r", exc)
        return 1
    return 0
