"""The webhook's serving certificate, made at start-up (drainsafe.tls; no cert-manager).

kube-apiserver verifies a service-referenced webhook against the webhook configuration's
caBundle for the name `<service>.<namespace>.svc` (kubernetes/apiserver
pkg/util/webhook/client.go, `serverName := svc.Name + "." + svc.Namespace + ".svc"`), so the
certificate carries that name (and the longer cluster.local forms). The CA is a throw-away
self-signed one; its certificate is what the controller patches into caBundle.
"""

from __future__ import annotations

import datetime as dt

from drainsafe.tls import ServingCert, issue

DEFAULT_DAYS = 365

__all__ = ["DEFAULT_DAYS", "ServingCert", "make_serving_cert", "service_dns_names"]


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def make_serving_cert(dns_names: list[str], *, days: int = DEFAULT_DAYS,
                      now: dt.datetime | None = None) -> ServingCert:
    """A new CA and a server certificate for `dns_names` signed by it."""
    return issue(dns_names, ca_name="drainsafe-controller-ca",
                 server_name=dns_names[0] if dns_names else "drainsafe-controller",
                 days=days, now=now)
