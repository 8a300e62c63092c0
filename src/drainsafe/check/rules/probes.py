"""Probe rules: readiness exists, fails fast enough, and liveness does not kill a drain."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from drainsafe.check.context import Context
from drainsafe.check.findings import SECONDS, Finding, Path, Severity
from drainsafe.check.hooks import on_admin_port
from drainsafe.check.model import Container, Index, integer, mapping, number
from drainsafe.check.rules.registry import rule
from drainsafe.check.rules.termination import Serving, serves_traffic, serving
from drainsafe.check.serverfix import HOOK_HANDLERS, pre_stop, probe
from drainsafe.check.servers import (
    DRAIN_FAILING_PATHS,
    LIVENESS_STOPS_ON_TERMINATION,
    ServerShutdown,
)
from drainsafe.check.snippets import container_fix

# Probe defaults (kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#Probe).
DEFAULT_PERIOD = 10
DEFAULT_FAILURE_THRESHOLD = 3
DEFAULT_TIMEOUT = 1

READINESS_MISSING = rule(
    "readiness-missing", Severity.WARNING,
    "A serving container has no readinessProbe.",
    """
Without a readiness probe a pod counts as ready as soon as its containers start, so a Service
routes to it before the model is loaded (a GPU server can need minutes) and a rolling update
or a drain's replacement takes old pods away before the new ones can serve. Deletion itself
marks a pod unready, but readiness is also what external load balancers and some meshes
health-check during a drain.

Sources: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-probes ("When
should you use a readiness probe"); kube-score pod-probes, Polaris readinessProbeMissing.
""")


@READINESS_MISSING.check
def _readiness_missing(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        if not serves_traffic(index, w):
            continue
        behind_service = bool(index.services_for(w))
        for s in serving(w):
            c = s.container
            if c.spec.get("readinessProbe") or not (c.spec.get("ports") or behind_service):
                continue
            yield READINESS_MISSING.finding(
                w,
                f"container {c.name}: no readinessProbe; traffic reaches it before it can "
                "serve and a rollout cannot tell when a replacement is ready",
                _readiness_fix(w.pod_path, c, s.server),
                path=c.path,
            )


# Readiness endpoints each server has at a release: vLLM /health (vllm 0.18.0 and 0.32.0
# vllm/entrypoints/serve/instrumentator/health.py), TGI /health
# (huggingface/text-generation-inference v3.3.6 router/src/server.rs), SGLang /health (sglang
# 0.5.23 srt/entrypoints/http_server.py), Triton /v2/health/ready
# (triton-inference-server/server v2.71.0 src/http_server.cc server_regex_).
READY_PATHS = {"vllm": "/health", "tgi": "/health", "sglang": "/health",
               "triton": "/v2/health/ready"}


_READINESS_FIXES: dict[tuple[object, ...], str] = {}


def _readiness_fix(pod_path: Path, c: Container, server: ServerShutdown | None) -> str:
    """readiness-missing's fix, kept on all it is made of: the pod's path, the container's
    name and first port (its type too: True == 1), the server's name and admin endpoint
    (findings-heavy sarif -0.3 % instructions: 1,333 findings, 2 fixes)."""
    port = _first_port(c.spec)
    key = (pod_path, c.name, port, type(port),
           None if server is None else (server.server, server.admin_port, server.ready_path))
    text = _READINESS_FIXES.get(key)
    if text is None:
        text = container_fix(pod_path, c.name, _readiness(port, server))
        if len(_READINESS_FIXES) < 10_000:
            _READINESS_FIXES[key] = text
    return text


def _readiness(port: int | str, server: ServerShutdown | None) -> dict[str, Any]:
    timing = {"periodSeconds": 2, "failureThreshold": 1}
    name = server.server if server is not None else ""
    if server is not None and server.admin_port is not None:
        # drainsafe serve/run: readiness is on the admin port only.
        return {"readinessProbe": {"httpGet": {"path": server.ready_path or "/readyz",
                                               "port": server.admin_port}, **timing}}
    if name in READY_PATHS:
        return {"readinessProbe": {"httpGet": {"path": READY_PATHS[name],
                                               "port": port}, **timing}}
    # An unknown server's endpoints are unknown: a TCP check needs none.
    return {"readinessProbe": {"tcpSocket": {"port": port}, **timing}}


READINESS_NOT_DRAIN_AWARE = rule(
    "readiness-not-drain-aware", Severity.WARNING,
    "drainsafe serve/run reports readiness on its admin port; the readinessProbe asks elsewhere.",
    """
drainsafe serve and run answer readiness on their admin port (drainsafe-admin, 8490 by
default): 503 from the first instant of the drain, and, for run, while the wrapped server is
not ready. The application's own port knows neither: it answers 200 through the drain delay
(the window in which a load balancer that health-checks the pod must notice it going) and,
behind run, as soon as the server listens, before its model is loaded. A TCP or exec probe,
or an HTTP probe on another port, so reads a draining pod as ready. Probe GET /readyz on the
admin port.

Sources: drainsafe docs/server.md (the admin endpoints); kubernetes.io/docs/concepts/
services-networking/endpoint-slices/#conditions (what watches EndpointSlices sees) and the
readiness-slow rule (what a health-checking load balancer sees).
""")


@READINESS_NOT_DRAIN_AWARE.check
def _readiness_not_drain_aware(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        for s in serving(w):
            c, server = s.container, s.server
            readiness = mapping(c.spec.get("readinessProbe"))
            if server is None or server.admin_port is None or not readiness:
                continue
            http = mapping(readiness.get("httpGet"))
            if http and on_admin_port(c, server, http.get("port")):
                continue
            where = (f"port {http.get('port')}" if http else
                     next((h for h in ("tcpSocket", "exec", "grpc") if h in readiness), "?"))
            path = server.ready_path or "/readyz"
            yield READINESS_NOT_DRAIN_AWARE.finding(
                w,
                f"container {c.name}: readinessProbe asks {where}, not drainsafe's {path} on "
                f"the admin port {server.admin_port}: it stays ready through the drain",
                container_fix(w.pod_path, c.name, {"readinessProbe": probe(
                    readiness, "httpGet", {"path": path, "port": server.admin_port})}),
                path=(*c.path, "readinessProbe"),
            )


def _first_port(container: dict[str, Any]) -> int | str:
    for port in container.get("ports") or []:
        if isinstance(port, dict) and port.get("containerPort") is not None:
            value = port["containerPort"]
            return value if isinstance(value, int | str) else 8000
    return 8000


def detection_seconds(probe: dict[str, Any]) -> float:
    """Worst-case time before a failing probe marks the container unready."""
    period = number(probe.get("periodSeconds")) or DEFAULT_PERIOD
    failures = integer(probe.get("failureThreshold")) or DEFAULT_FAILURE_THRESHOLD
    timeout = number(probe.get("timeoutSeconds")) or DEFAULT_TIMEOUT
    return period * failures + timeout


READINESS_SLOW = rule(
    "readiness-slow", Severity.WARNING,
    "Readiness takes longer to fail than the drain delay, behind a health-checking load balancer.",
    """
Components that watch EndpointSlices see a terminating pod become not-ready at once. Load
balancers that health-check the pod instead (Service type LoadBalancer, and
externalTrafficPolicy: Local, where cloud LBs probe the node) only notice when the readiness
probe has failed failureThreshold times: periodSeconds x failureThreshold + timeoutSeconds in
the worst case, 31 s with the defaults. If that is longer than the drain delay, the LB keeps
sending requests after the server has closed its listener. Make the probe fail fast on SIGTERM
(short period, failureThreshold 1) or lengthen the drain delay.

Sources: kubernetes.io/docs/concepts/services-networking/endpoint-slices/#conditions
(terminating endpoints are never ready); kube-score README_PROBES.md (the 30 s default
detection); KEP-1669 (externalTrafficPolicy Local and terminating endpoints).
""")


@READINESS_SLOW.check
def _readiness_slow(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        external = [s for s in index.services_for(w) if s.health_checked_externally]
        if not external:
            continue
        for s in serving(w):
            probe = mapping(s.container.spec.get("readinessProbe"))
            if not probe:
                continue
            detect = detection_seconds(probe)
            delay = s.delay.known
            if detect <= delay:
                continue
            svc = external[0]
            why = "type LoadBalancer" if svc.type == "LoadBalancer" else \
                "externalTrafficPolicy Local"
            period = number(probe.get("periodSeconds")) or DEFAULT_PERIOD
            failures = integer(probe.get("failureThreshold")) or DEFAULT_FAILURE_THRESHOLD
            timeout = number(probe.get("timeoutSeconds")) or DEFAULT_TIMEOUT
            yield READINESS_SLOW.finding(
                w,
                f"container {s.container.name}: Service {svc.ref.name} ({why}) is health-checked; "
                f"readiness fails after up to {SECONDS[period]}s x {failures} + "
                f"{SECONDS[timeout]}s = {SECONDS[detect]}s, longer than the drain delay "
                f"{SECONDS[delay]}s",
                _fast_fix(w.pod_path, s.container, context),
                path=(*s.container.path, "readinessProbe"),
            )


_FAST_FIXES: dict[tuple[object, ...], str] = {}


def _fast_fix(pod_path: Path, c: Container, context: Context) -> str:
    """readiness-slow's fix: a probe that fails fast and a preStop sleep that outlasts it.
    Kept on all it is made of: the pod's path, the container's name, the preStop handlers
    the sleep replaces and the propagation seconds (findings-heavy sarif -0.4 %
    instructions: building the fields and their snippet key was most of its cost)."""
    hook = mapping(mapping(c.spec.get("lifecycle")).get("preStop"))
    key = (pod_path, c.name, tuple([h for h in HOOK_HANDLERS if h in hook]),
           context.propagation_seconds)
    text = _FAST_FIXES.get(key)
    if text is None:
        text = container_fix(pod_path, c.name, {
            "readinessProbe": {"periodSeconds": 2, "failureThreshold": 1, "timeoutSeconds": 1},
            "lifecycle": pre_stop(c, "sleep", {
                "seconds": max(math.ceil(context.propagation_seconds), 3)})})
        if len(_FAST_FIXES) < 10_000:
            _FAST_FIXES[key] = text
    return text


def _endpoint(probe: dict[str, Any]) -> tuple[str, str] | None:
    http = mapping(probe.get("httpGet"))
    if http:
        return str(http.get("path") or "/"), str(http.get("port"))
    grpc = mapping(probe.get("grpc"))
    if grpc:
        return f"grpc:{grpc.get('service') or ''}", str(grpc.get("port"))
    exec_ = mapping(probe.get("exec"))
    if exec_:
        return "exec:" + " ".join(str(c) for c in exec_.get("command") or []), ""
    return None


LIVENESS_ON_READINESS = rule(
    "liveness-on-readiness", Severity.WARNING,
    "Liveness restarts the server where readiness fails on purpose (warning), or probes the "
    "readiness endpoint (info: a style preference).",
    """
Readiness fails on purpose (a server draining, or still loading its model) so that traffic
moves away; liveness restarts the container when it fails. So liveness on an endpoint that
fails on purpose restarts a server that is working as meant:

- drainsafe serve/run: /readyz is 503 until the app (serve) or the wrapped server (run) is
  ready, and from the drain's first instant; liveness there restarts a server still loading.
  Its /livez on the admin port is the liveness endpoint.
- Before Kubernetes 1.21 (and the 1.18-1.20 patch releases that took the change), the
  kubelet kept probing liveness while a pod terminated: a server whose health endpoint fails
  once SIGTERM starts its drain (SGLang /health and /health_generate; Triton
  /v2/health/live and /v2/health/ready) was restarted in the middle of its drain. From 1.21
  the kubelet stops liveness probes once the pod terminates, before the preStop hook and
  SIGTERM, so no drain is cut short this way (--cluster-version decides).

Otherwise a liveness probe identical to the readiness probe is a style preference, reported
as info: a readiness failure (an overloaded server timing out) then restarts the container
too. vLLM's /health stays 200 while it drains and fails only for a dead engine, so liveness
on it restarts only a dead server. The fix is a TCP liveness check on the serving port: it
needs no endpoint the server may not have (vLLM has /health and /ping, no /live or /livez).

Sources: kubernetes/kubernetes pkg/kubelet/prober/worker.go (doProbe: "Pod deletion
requested, setting probe result to success", PR #98571) and pkg/kubelet/kubelet.go
(SyncTerminatingPod: StopLivenessAndStartup before killPod); sgl-project/sglang 0.5.23
python/sglang/srt/entrypoints/http_server.py (503 "during shutdown" once gracefully_exit is
set); triton-inference-server/core src/server.cc (IsLive/IsReady: UNAVAILABLE "Server
exiting"); vllm 0.18.0 and 0.32.0 vllm/entrypoints/serve/instrumentator/health.py (/health
is 503 only for a dead engine); drainsafe docs/server.md (/readyz, /livez);
kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/; kube-score
pod-probes-identical.
""")


def _liveness_problem(s: Serving, live: tuple[str, str], ready: tuple[str, str] | None,
                      context: Context) -> tuple[Severity, str] | None:
    """Why liveness on `live` is reported, and how severely (None: it is not): a pure
    function of the server's facts at its release and the kubelet's (servers.py)."""
    server = s.server
    name = server.server if server is not None else ""
    if server is not None and server.admin_port is not None and live == ready:
        return Severity.WARNING, (
            f"liveness restarts a server that is not ready yet: it probes drainsafe's "
            f"readiness endpoint {live[0]}, 503 while the server loads and while it drains")
    failing = DRAIN_FAILING_PATHS.get(name, ())
    if live[0] in failing and not context.at_least(*LIVENESS_STOPS_ON_TERMINATION):
        return Severity.WARNING, (
            f"liveness restarts a draining server: {name} fails {live[0]} while it drains, "
            f"and the kubelet before 1.21 keeps probing liveness during termination")
    if live == ready:
        return Severity.INFO, (
            f"liveness probes the readiness endpoint {live[0]} (a style preference: a "
            "readiness failure restarts the container too; not a drain problem, the kubelet "
            "stops liveness probes once the pod terminates)")
    return None


@LIVENESS_ON_READINESS.check
def _liveness(index: Index, context: Context) -> Iterator[Finding]:
    for w in index.workloads:
        for s in serving(w):
            c = s.container
            liveness = mapping(c.spec.get("livenessProbe"))
            if not liveness:
                continue
            live = _endpoint(liveness)
            if live is None:
                continue
            found = _liveness_problem(s, live, _endpoint(mapping(c.spec.get("readinessProbe"))),
                                      context)
            if found is None:
                continue
            severity, reason = found
            port = mapping(liveness.get("httpGet")).get("port") or _first_port(c.spec)
            if s.server is not None and s.server.admin_port is not None:
                # drainsafe serve/run: /livez on the admin port (and only there).
                if not on_admin_port(c, s.server, port):
                    port = s.server.admin_port
                fixed = probe(liveness, "httpGet", {"path": "/livez", "port": port})
            else:
                # A TCP check: the process is up and listening. It needs no endpoint the
                # server may lack, and it passes while the server drains or is overloaded.
                fixed = probe(liveness, "tcpSocket", {"port": port})
            yield LIVENESS_ON_READINESS.finding(
                w,
                f"container {c.name}: {reason}",
                container_fix(w.pod_path, c.name, {"livenessProbe": fixed}),
                path=(*c.path, "livenessProbe"),
                severity=severity,
            )
