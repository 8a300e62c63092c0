"""The serving certificate shared by all replicas, and its CA in the webhook configuration.

Every replica must present a certificate the API server trusts through one caBundle, so the
first replica to start makes the certificate (drainsafe.controller.certs) and stores it in a
Secret (type kubernetes.io/tls, keys tls.crt, tls.key, ca.crt); the others read it (a 409 on
create means another replica won the race: read theirs). The CA is then written into every
webhook of the ValidatingWebhookConfiguration whose service is ours, with the
resourceVersion read (a 409 re-reads). `kubectl apply` of the same configuration keeps the
caBundle: it is in neither the manifest nor the last-applied annotation, so the three-way
merge leaves it alone.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from typing import Any

from drainsafe.controller.certs import ServingCert, make_serving_cert, service_dns_names
from drainsafe.controller.config import ControllerConfig
from drainsafe.kube import KubeClient, NotFound, api_path
from drainsafe.kube.retry import KeptChanging, retry_on_conflict, retry_write

log = logging.getLogger(__name__)
RENEW_BEFORE = dt.timedelta(days=30)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret_manifest(cfg: ControllerConfig, cert: ServingCert) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": cfg.tls_secret, "namespace": cfg.namespace,
                         "labels": {"app.kubernetes.io/name": "drainsafe-controller"}},
            "data": {"tls.crt": _b64(cert.cert_pem), "tls.key": _b64(cert.key_pem),
                     "ca.crt": _b64(cert.ca_pem)}}


def cert_from_secret(secret: dict[str, Any]) -> ServingCert | None:
    data = secret.get("data") or {}
    try:
        cert = ServingCert(base64.b64decode(data["ca.crt"]), base64.b64decode(data["tls.crt"]),
                           base64.b64decode(data["tls.key"]))
        cert.not_after()
    except (KeyError, ValueError, TypeError):
        return None
    return cert


async def ensure_serving_cert(client: KubeClient, cfg: ControllerConfig) -> ServingCert:
    """The shared certificate: read it, or make and store it (renewed 30 days before expiry).
    Replicas race on it; a 409 (AlreadyExists or Conflict) means another wrote first."""
    path = api_path("v1", "secrets", namespace=cfg.namespace, name=cfg.tls_secret)

    async def read() -> dict[str, Any] | None:
        try:
            return await client.get(path)
        except NotFound:
            return None

    async def decide(secret: dict[str, Any] | None) -> ServingCert:
        cert = cert_from_secret(secret) if secret is not None else None
        if cert is not None and cert.not_after() - dt.datetime.now(dt.UTC) > RENEW_BEFORE:
            return cert
        fresh = make_serving_cert(service_dns_names(cfg.service, cfg.namespace))
        body = secret_manifest(cfg, fresh)
        if secret is None:
            await client.post(api_path("v1", "secrets", namespace=cfg.namespace), body)
        else:
            body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
            await client.request("PUT", path, body=body)
        return fresh

    return await retry_write(read, decide, what=f"secret {cfg.namespace}/{cfg.tls_secret}")


async def sync_ca_bundle(client: KubeClient, cfg: ControllerConfig, ca_pem: bytes) -> bool:
    """Write our CA into our webhooks; True when it is there (already or now)."""
    path = api_path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations",
                    name=cfg.webhook_config)
    bundle = _b64(ca_pem)

    async def decide(config: dict[str, Any]) -> bool:
        changed = False
        for hook in config.get("webhooks") or []:
            svc = (hook.get("clientConfig") or {}).get("service") or {}
            if svc.get("name") == cfg.service and svc.get("namespace") == cfg.namespace \
                    and hook["clientConfig"].get("caBundle") != bundle:
                hook["clientConfig"]["caBundle"] = bundle
                changed = True
        if changed:
            await client.request("PUT", path, body=config)
            log.info("caBundle of %s updated", cfg.webhook_config)
        return True

    try:
        return await retry_on_conflict(client, path, decide)
    except NotFound:
        log.warning("ValidatingWebhookConfiguration %s not found (yet)", cfg.webhook_config)
        return False
    except KeptChanging:
        return False
