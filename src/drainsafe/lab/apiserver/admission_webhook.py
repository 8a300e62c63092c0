"""Validating admission webhooks, called as kube-apiserver calls them (for pods/eviction).

The lab runs webhooks only where drainsafe needs them: the pods/eviction subresource, CREATE.
Everything else about the call follows kube-apiserver (kubernetes/kubernetes at v1.31,
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/...):

- **Which webhooks** (`predicates/rules/rules.go`): a rule matches when operations, apiGroups
  and apiVersions contain the request's value or "*", the scope fits ("*", "Namespaced",
  "Cluster"), and one of `resources` matches as "resource/subresource" split at the first
  "/": `pods` does not match `pods/eviction`; `pods/eviction`, `pods/*` and `*/*` do.
- **namespaceSelector** (`predicates/namespace/matcher.go`): the labels of the request's
  namespace; an empty selector matches everything.
- **objectSelector** (`predicates/object/matcher.go` `MatchObjectSelector`): matched against
  the labels of the request's *object* and *old object*. For pods/eviction the object is the
  Eviction (its own, usually empty, labels) and there is no old object on CREATE, so an
  objectSelector on pod labels means the webhook is never called for evictions; the
  webhook has to read the pod itself.
- **The call** (`validating/dispatcher.go` `callHook`): a POST of an AdmissionReview
  (admission.k8s.io/v1) with `?timeout=<timeoutSeconds>s`, bounded by timeoutSeconds
  (default 10); webhooks run in parallel and the first error is returned. A service
  reference is resolved to one ready endpoint of the Service (the endpoint resolver of
  `--enable-aggregator-routing`, `pkg/util/proxy/proxy.go` `ResolveEndpoint`; the lab's pods
  are processes on loopback IPs) and the server certificate is verified against caBundle
  for the name `<service>.<namespace>.svc` (`pkg/util/webhook/client.go`).
- **The answer** (`request/admissionreview.go` `VerifyAdmissionResponse`): apiVersion/kind
  must be admission.k8s.io/v1 AdmissionReview, `response` present, `response.uid` equal to
  the request's. Each `warnings` entry becomes a `Warning: 299 - "..."` header.
- **Failures** (a refused connection, TLS error, timeout, non-2xx, an invalid answer) are
  `ErrCallingWebhook`: failurePolicy Ignore skips the webhook, Fail (the v1 default)
  answers 500 InternalError "failed calling webhook ...".
- **A denial** (`errors/statuserror.go` `ToStatusErr`): the webhook's `status` is returned
  with its code when >= 400 (else 400), status Failure, and the message prefixed with
  `admission webhook "<name>" denied the request: `; a 429 with `retryAfterSeconds` keeps
  both, so callers back off exactly as for a budget (`responsewriters/writers.go` sets
  Retry-After from the details).
- **dryRun**: a webhook whose sideEffects is not None/NoneOnDryRun fails the request with
  400 "does not support dry run" (`errors/statuserror.go` `NewDryRunUnsupportedErr`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import random
import socket
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event, Store
from drainsafe.labels import SelectorError, from_label_selector

WEBHOOK_CONFIGS = BY_KEY["admissionregistration.k8s.io/validatingwebhookconfigurations"]
NAMESPACES = BY_KEY["namespaces"]
SERVICES = BY_KEY["services"]
SLICES = BY_KEY["discovery.k8s.io/endpointslices"]
DEFAULT_TIMEOUT_SECONDS = 10  # admissionregistration/v1 defaults.go
REVIEW_API_VERSION = "admission.k8s.io/v1"
LAB_USER = {"username": "drainsafe-lab-admin",
            "groups": ["system:masters", "system:authenticated"]}


@dataclass(frozen=True)
class Attributes:
    """What the dispatcher knows about one request (admission.Attributes)."""

    operation: str
    group: str
    version: str
    resource: str
    subresource: str
    kind: tuple[str, str, str]  # group, version, kind of the object
    namespace: str
    name: str
    obj: Mapping[str, Any] | None
    old_obj: Mapping[str, Any] | None = None
    dry_run: bool = False
    user: Mapping[str, Any] = field(default_factory=lambda: dict(LAB_USER))


def eviction_attributes(namespace: str, name: str, eviction: Mapping[str, Any], *,
                        dry_run: bool) -> Attributes:
    """Attributes of POST pods/{name}/eviction (the object is the Eviction)."""
    api_version = str(eviction.get("apiVersion") or "policy/v1")
    version = api_version.split("/", 1)[1] if "/" in api_version else "v1"
    return Attributes("CREATE", "", "v1", "pods", "eviction", ("policy", version, "Eviction"),
                      namespace, name, eviction, None, dry_run)


# ---- matching (pure) -----------------------------------------------------------------

def _contains(values: Sequence[Any] | None, value: str) -> bool:
    values = values or []
    return "*" in values or value in values


def rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """rules.Matcher.Matches: operation, group, version, resource/subresource, scope."""
    if not (_contains(rule.get("operations"), attrs.operation)
            and _contains(rule.get("apiGroups"), attrs.group)
            and _contains(rule.get("apiVersions"), attrs.version)):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster" and attrs.namespace:
        return False
    if scope == "Namespaced" and not attrs.namespace:
        return False
    for entry in rule.get("resources") or []:
        res, _, sub = str(entry).partition("/")
        if res in ("*", attrs.resource) and sub in ("*", attrs.subresource):
            return True
    return False


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("labels") or {}


def object_matches(webhook: Mapping[str, Any], attrs: Attributes) -> bool:
    """object.Matcher.MatchObjectSelector: the object's or the old object's labels."""
    selector = from_label_selector(webhook.get("objectSelector") or {})
    if selector.empty:
        return True
    return any(labels is not None and selector.matches(labels)
               for labels in (_labels(attrs.obj), _labels(attrs.old_obj)))


def namespace_matches(webhook: Mapping[str, Any], attrs: Attributes,
                      namespace_labels: Mapping[str, str] | None) -> bool:
    """namespace.Matcher.MatchNamespaceSelector for a namespaced request."""
    selector = from_label_selector(webhook.get("namespaceSelector") or {})
    if selector.empty or not attrs.namespace:
        return True
    if namespace_labels is None:
        raise st.StatusError(500, "InternalError", "Internal error occurred: namespace "
                             f"{attrs.namespace!r} not found", details={"causes": [
                                 {"message": f"namespace {attrs.namespace!r} not found"}]})
    return selector.matches(namespace_labels)


def relevant_webhooks(configs: Sequence[Mapping[str, Any]], attrs: Attributes,
                      namespace_labels: Mapping[str, str] | None
                      ) -> list[Mapping[str, Any]]:
    """The webhooks to call, in configuration-name order (the hook source's order)."""
    out = []
    for config in sorted(configs, key=lambda c: str(c["metadata"]["name"])):
        for webhook in config.get("webhooks") or []:
            if not any(rule_matches(r, attrs) for r in webhook.get("rules") or []):
                continue
            try:
                if not (namespace_matches(webhook, attrs, namespace_labels)
                        and object_matches(webhook, attrs)):
                    continue
            except SelectorError as exc:
                raise st.StatusError(500, "InternalError",
                                     f"Internal error occurred: {exc}") from None
            out.append(webhook)
    return out


# ---- the review (pure) ---------------------------------------------------------------

def admission_review(attrs: Attributes, uid: str) -> dict[str, Any]:
    """The AdmissionReview v1 request body (request/admissionreview.go CreateV1AdmissionReview)."""
    resource = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    kind = {"group": attrs.kind[0], "version": attrs.kind[1], "kind": attrs.kind[2]}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": attrs.operation,
        "userInfo": dict(attrs.user),
        "object": attrs.obj,
        "oldObject": attrs.old_obj,
        "dryRun": attrs.dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    return {"kind": "AdmissionReview", "apiVersion": REVIEW_API_VERSION, "request": request}


class CallError(Exception):
    """ErrCallingWebhook: the webhook could not give an answer."""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    status: Mapping[str, Any] | None
    warnings: tuple[str, ...]


def read_response(review: Any, uid: str) -> Verdict:
    """VerifyAdmissionResponse for a validating webhook and AdmissionReview v1."""
    if not isinstance(review, dict):
        raise CallError("received invalid webhook response: the body is not a JSON object")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        raise CallError("received invalid webhook response: expected webhook response of "
                        f"admission.k8s.io/v1, Kind=AdmissionReview, got "
                        f"{review.get('apiVersion')}, Kind={review.get('kind')}")
    response = review.get("response")
    if not isinstance(response, dict):
        raise CallError("received invalid webhook response: webhook response was absent")
    if response.get("uid") != uid:
        raise CallError("received invalid webhook response: expected response.uid="
                        f"{uid!r}, got {response.get('uid')!r}")
    if response.get("patch") or response.get("patchType"):
        raise CallError("received invalid webhook response: validating webhook may not "
                        "return a patch")
    result = response.get("status")
    warnings = tuple(str(w) for w in response.get("warnings") or [])
    return Verdict(bool(response.get("allowed")), result if isinstance(result, dict) else None,
                   warnings)


def denial(webhook_name: str, result: Mapping[str, Any] | None) -> st.StatusError:
    """ToStatusErr: the webhook's Status, code kept when >= 400, message prefixed."""
    result = dict(result or {})
    denied_by = f"admission webhook {webhook_name!r}".replace("'", '"') + \
        " denied the request"
    code = int(result.get("code") or 0)
    if code < 400:
        code = 400
    message = str(result.get("message") or "")
    reason = str(result.get("reason") or "")
    if message:
        message = f"{denied_by}: {message}"
    elif reason:
        message = f"{denied_by}: {reason}"
    else:
        message = f"{denied_by} without explanation"
    details = dict(result.get("details") or {})
    retry_after = int(details.get("retryAfterSeconds") or 0)
    return st.StatusError(code, reason, message, details=details, retry_after=retry_after)


def call_failed(webhook_name: str, why: str) -> st.StatusError:
    """apierrors.NewInternalError(ErrCallingWebhook) for failurePolicy Fail."""
    text = f'failed calling webhook "{webhook_name}": {why}'
    return st.StatusError(500, "InternalError", f"Internal error occurred: {text}",
                          details={"causes": [{"message": text}]})


# ---- the call (I/O) --------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    url: str
    server_name: str
    service: tuple[str, str] | None = None  # (namespace, name) it was resolved from

    @property
    def address(self) -> str:
        return urlsplit(self.url).netloc


def ready_endpoints(store: Store, namespace: str, name: str) -> set[str]:
    """The Service's ready endpoints, "address:port" for every port of its EndpointSlices."""
    out: set[str] = set()
    for es in store.items(SLICES, namespace):
        if ((es.get("metadata") or {}).get("labels") or {}).get(
                "kubernetes.io/service-name") != name:
            continue
        ports = [int(p["port"]) for p in es.get("ports") or [] if p.get("port")]
        for ep in es.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            out.update(f"{addr}:{port}" for addr in ep.get("addresses") or [] for port in ports)
    return out


def resolve_service(store: Store, ref: Mapping[str, Any]) -> Target:
    """One ready endpoint of the referenced Service, as the endpoint resolver picks it."""
    namespace, name = str(ref.get("namespace") or ""), str(ref.get("name") or "")
    port = int(ref.get("port") or 443)
    path = str(ref.get("path") or "")
    svc = store.peek(SERVICES, namespace, name)
    if svc is None:
        raise CallError(f'service "{name}" not found')
    svc_port = next((p for p in (svc.get("spec") or {}).get("ports") or []
                     if int(p.get("port", 0)) == port), None)
    if svc_port is None:
        raise CallError(f'no service port {port} found for service "{name}"')
    port_name = svc_port.get("name") or ""
    choices: list[str] = []
    for es in store.items(SLICES, namespace):
        if ((es.get("metadata") or {}).get("labels") or {}).get(
                "kubernetes.io/service-name") != name:
            continue
        target = next((int(p["port"]) for p in es.get("ports") or []
                       if (p.get("name") or "") == port_name and p.get("port")), None)
        if target is None:
            continue
        for ep in es.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            choices.extend(f"{addr}:{target}" for addr in ep.get("addresses") or [])
    if not choices:
        raise CallError(f'service unavailable: no endpoints available for service "{name}"')
    return Target(f"https://{random.choice(choices)}{path}", f"{name}.{namespace}.svc",
                  (namespace, name))


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Verify against caBundle (base64 PEM in JSON), or the system roots when it is unset."""
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as exc:
        raise CallError(f"could not get REST client: unable to load root certificates: "
                        f"{exc}") from None


@dataclass
class _Pool:
    """A keep-alive client to one webhook endpoint, and the calls on it now."""

    client: httpx.AsyncClient
    service: tuple[str, str] | None  # (namespace, name) of the Service; None: a url
    in_flight: int = 0


class WebhookDispatcher:
    """Calls the validating webhooks that match a request; raises the error to return.

    Keep-alive connections are kept per endpoint, and an endpoint's idle ones are closed
    once it is no longer ready (its pod terminating). kube-apiserver's Go transport reads
    every idle keep-alive connection (net/http persistConn.readLoop), so a webhook server
    that closes one as it stops sees it go at once; httpx notices only at the connection's
    next use, and the server's graceful stop waited for the TLS close until its own timeout
    (uvicorn's timeout_graceful_shutdown: 5 s of every guard replica's stop after it had
    served a call). No call goes to an endpoint that is not ready (resolve_service), so
    closing its idle connections then changes nothing else."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls = 0  # webhook calls made (tests and the benchmark read it)
        # One keep-alive client per caBundle, server name and endpoint, as the API server
        # caches a REST client per webhook (pkg/util/webhook ClientManager's LRU cache): a
        # TLS handshake per call would dominate the call.
        self._pools: dict[tuple[str, str, str], _Pool] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._unlisten = store.listen(self._changed)

    def _pool(self, ca_bundle: str | None, target: Target) -> tuple[tuple[str, str, str],
                                                                    _Pool]:
        key = (ca_bundle or "", target.server_name, target.address)
        pool = self._pools.get(key)
        if pool is None:  # a lab has a handful of webhooks: no eviction needed
            # TCP_NODELAY, as Go's net.Dial sets by default: without it the request body
            # waits for the ACK of the headers (Nagle vs delayed ACK, ~40 ms per call).
            # Every connection kept alive: the API server multiplexes webhook calls over
            # HTTP/2; with HTTP/1.1 a pool that closes connections beyond a keep-alive limit
            # pays a TLS handshake per call exactly when calls pile up.
            transport = httpx.AsyncHTTPTransport(
                verify=tls_context(ca_bundle),
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=100),
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            pool = _Pool(httpx.AsyncClient(transport=transport), target.service)
            self._pools[key] = pool
        return key, pool

    def _changed(self, event: Event) -> None:
        """An EndpointSlice changed: retire the pools of endpoints no longer ready."""
        if event.resource != SLICES.key or not self._pools:
            return
        ready: dict[tuple[str, str], set[str]] = {}
        for key, pool in list(self._pools.items()):
            if pool.service is None:
                continue
            if pool.service not in ready:
                ready[pool.service] = ready_endpoints(self.store, *pool.service)
            if key[2] not in ready[pool.service]:
                del self._pools[key]  # the next call to it, ready again, opens a new one
                if pool.in_flight == 0:
                    self._close(pool)

    def _close(self, pool: _Pool) -> None:
        try:
            task = asyncio.get_running_loop().create_task(pool.client.aclose())
        except RuntimeError:  # no loop: nothing is open either
            return
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self._unlisten()
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.client.aclose()
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def validate(self, attrs: Attributes) -> list[str]:
        """Return the warnings, or raise the StatusError the request must fail with."""
        configs = list(self.store.items(WEBHOOK_CONFIGS))
        if not configs:
            return []
        ns = self.store.peek(NAMESPACES, "", attrs.namespace) if attrs.namespace else None
        ns_labels = None if ns is None else (ns.get("metadata") or {}).get("labels") or {}
        hooks = relevant_webhooks(configs, attrs, ns_labels)
        if not hooks:
            return []
        results = await asyncio.gather(*(self._one(h, attrs) for h in hooks))
        warnings = [w for ws, _ in results for w in ws]
        errors = [err for _, err in results if err is not None]
        if errors:
            raise errors[0]
        return warnings

    async def _one(self, webhook: Mapping[str, Any], attrs: Attributes
                   ) -> tuple[list[str], st.StatusError | None]:
        name = str(webhook.get("name") or "")
        ignore = webhook.get("failurePolicy") == "Ignore"
        if attrs.dry_run and webhook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            return [], st.StatusError(400, "BadRequest", f'admission webhook "{name}" does '
                                      "not support dry run")
        try:
            verdict = await self._call(webhook, attrs)
        except CallError as exc:
            if ignore:
                return [], None
            return [], call_failed(name, str(exc))
        if verdict.allowed:
            return list(verdict.warnings), None
        return list(verdict.warnings), denial(name, verdict.status)

    async def _call(self, webhook: Mapping[str, Any], attrs: Attributes) -> Verdict:
        config = webhook.get("clientConfig") or {}
        timeout = int(webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        if config.get("service"):
            target = resolve_service(self.store, config["service"])
        elif config.get("url"):
            url = str(config["url"])
            target = Target(url, urlsplit(url).hostname or "")
        else:
            raise CallError("could not get REST client: no clientConfig url or service")
        uid = str(uuid.uuid4())
        body = json.dumps(admission_review(attrs, uid)).encode()
        self.calls += 1
        key, pool = self._pool(config.get("caBundle"), target)
        pool.in_flight += 1
        try:
            async with asyncio.timeout(timeout):
                resp = await pool.client.post(
                    target.url, params={"timeout": f"{timeout}s"}, content=body,
                    headers={"Content-Type": "application/json",
                             "Accept": "application/json"},
                    extensions={"sni_hostname": target.server_name}, timeout=timeout)
        except (TimeoutError, httpx.TimeoutException):
            raise CallError(f'failed to call webhook: Post "{target.url}?timeout={timeout}s": '
                            "context deadline exceeded") from None
        except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
            raise CallError(f'failed to call webhook: Post "{target.url}?timeout={timeout}s": '
                            f"{exc}") from None
        finally:
            pool.in_flight -= 1
            if pool.in_flight == 0 and self._pools.get(key) is not pool:
                self._close(pool)  # retired while this call was on it
        if not 200 <= resp.status_code < 300:
            raise CallError(f"failed to call webhook: an error on the server "
                            f"({resp.text[:200]!r}) has prevented the request from "
                            f"succeeding (HTTP {resp.status_code})")
        try:
            review = resp.json()
        except ValueError as exc:
            raise CallError(f"received invalid webhook response: {exc}") from None
        return read_response(review, uid)


def warning_headers(warnings: Sequence[str]) -> list[str]:
    """`Warning: 299 - "text"` values (warning.AddWarning; kubectl prints "Warning: text")."""
    return ['299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in warnings]

