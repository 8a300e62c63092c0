"""An async Kubernetes API client built from a kubeconfig, speaking plain JSON dicts.

lightkube does the connection work: kubeconfig parsing (lightkube.KubeConfig), TLS with
the cluster CA, client certificates, bearer tokens and token files
(lightkube.config.client_adapter). On top of that this module adds what drainsafe needs
and lightkube lacks or gets in the way of:

- exec credential plugins v1 with expiry-driven refresh (drainsafe.kube.auth);
- KUBECONFIG as a colon-separated list, merged first-wins as kubectl does
  (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/);
- every failure as a typed error (drainsafe.kube.errors), including non-JSON 429s, which
  lightkube surfaces as a bare HTTPStatusError;
- objects as plain dicts, so the drain planner stays a pure function of API data;
- raw line streams for our own list+watch loop (drainsafe.kube.watch).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx2
import yaml

from drainsafe.kube.auth import ExecConfig, ExecCredentialAuth
from drainsafe.kube.errors import KubeError, TransportError, error_from_response

Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]

_PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
DEFAULT_TIMEOUT_SECONDS = 30.0
LIST_CHUNK = 500  # kubectl's --chunk-size default (kubectl pkg/cmd/util/helpers.go)


class KubeconfigError(ValueError):
    """The kubeconfig is missing, unreadable, or lacks the requested context."""


def api_path(
    group_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path: core "v1" lives under /api, groups under /apis."""
    parts = ["/api/v1"] if group_version == "v1" else [f"/apis/{group_version}"]
    if namespace is not None:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name is not None:
        parts.append(name)
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


def kubeconfig_paths(explicit: str | None = None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def merge_kubeconfigs(docs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """kubectl's merge: for named entries and current-context, the first file wins."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    for key in ("clusters", "users", "contexts"):
        seen: dict[str, Any] = {}
        for doc in docs:
            for entry in doc.get(key) or []:
                name = entry.get("name")
                if name is not None and name not in seen:
                    seen[name] = entry
        merged[key] = list(seen.values())
    for doc in docs:
        if doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
            break
    return merged


def load_kubeconfig(explicit: str | None = None) -> tuple[dict[str, Any], Path]:
    paths = kubeconfig_paths(explicit)
    docs: list[Mapping[str, Any]] = []
    for path in paths:
        if not path.exists():
            if explicit:
                raise KubeconfigError(f"kubeconfig {path} does not exist")
            continue
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except UnicodeDecodeError as exc:
            raise KubeconfigError(f"kubeconfig {path}: not UTF-8 text (a binary file?)") from exc
        except (OSError, yaml.YAMLError, RecursionError) as exc:
            raise KubeconfigError(f"kubeconfig {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise KubeconfigError(f"kubeconfig {path}: not a mapping")
        docs.append(doc)
    if not docs:
        raise KubeconfigError(
            "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config"
        )
    first = next(p for p in paths if p.exists())
    return merge_kubeconfigs(docs), first


@dataclass(frozen=True)
class ClusterIdentity:
    context: str
    server: str
    user: str

    def actor(self) -> str:
        """Who is acting, for the cordon ownership annotation."""
        try:
            local = getpass.getuser()
        except (KeyError, OSError):
            local = "unknown"
        return f"{local}@{socket.gethostname()} as {self.user or '?'} (context {self.context})"


class KubeClient:
    """Thin async client; raises drainsafe.kube.errors.KubeError subclasses."""

    def __init__(self, http: httpx2.AsyncClient, identity: ClusterIdentity) -> None:
        self._http = http
        self.identity = identity

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> KubeClient:
        """A client for the kubeconfig's context. Any kubeconfig that cannot be used (binary,
        or fields of the wrong shape) is a KubeconfigError naming the file."""
        try:
            return cls._from_kubeconfig(kubeconfig, context, timeout)
        except KubeconfigError:
            raise
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            files = ", ".join(str(p) for p in kubeconfig_paths(kubeconfig))
            raise KubeconfigError(
                f"kubeconfig {files}: malformed ({type(exc).__name__}: {exc})") from exc

    @classmethod
    def _from_kubeconfig(cls, kubeconfig: str | None, context: str | None,
                         timeout: float) -> KubeClient:
        from lightkube import KubeConfig
        from lightkube.config import client_adapter

        doc, first = load_kubeconfig(kubeconfig)
        name = context or doc.get("current-context")
        contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []}
        if not name:
            raise KubeconfigError("kubeconfig has no current-context; pass --context")
        if name not in contexts:
            known = ", ".join(sorted(str(k) for k in contexts)) or "none"
            raise KubeconfigError(f"context {name!r} not found in kubeconfig (known: {known})")
        try:
            single = KubeConfig.from_dict(doc, fname=first).get(context_name=name)
        except Exception as exc:  # lightkube raises ConfigError and msgspec errors
            raise KubeconfigError(f"kubeconfig context {name!r}: {exc}") from exc
        if single is None:
            raise KubeconfigError(f"kubeconfig context {name!r} could not be loaded")
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
        http = client_adapter.AsyncClient(single, params)
        user_name = str(contexts[name].get("user") or "")
        cluster_name = contexts[name].get("cluster")
        users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or []}
        clusters = {c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or []}
        exec_section = users.get(user_name, {}).get("exec")
        if exec_section:
            # lightkube's own ExecAuth lacks v1 and expiry; replace it (see auth.py).
            http.auth = ExecCredentialAuth(
                ExecConfig.from_kubeconfig(exec_section, clusters.get(cluster_name))
            )
        identity = ClusterIdentity(context=name, server=single.cluster.server, user=user_name)
        return cls(http, identity)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Obj:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if content is not None:
            headers["Content-Type"] = content_type
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = httpx2.Timeout(timeout)
        try:
            resp = await self._http.request(
                method, path, params=dict(params or {}), content=content, headers=headers, **kwargs
            )
        except httpx2.HTTPError as exc:
            raise TransportError(
                code=0, reason=type(exc).__name__, message=str(exc) or repr(exc),
                method=method, path=path,
            ) from exc
        error = error_from_response(
            resp.status_code, resp.headers, resp.content, method=method, path=path
        )
        if error is not None:
            raise error
        if not resp.content:
            return {}
        try:
            data = resp.json()
        except ValueError as exc:
            raise KubeError(
                code=resp.status_code, reason="BadBody", message=f"response is not JSON: {exc}",
                method=method, path=path,
            ) from exc
        return data if isinstance(data, dict) else {"items": data}

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Obj:
        return await self.request("GET", path, params=params)

    async def list(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> tuple[list[Obj], str]:
        """All items across pages (limit/continue) and the list's resourceVersion."""
        query = {"limit": str(LIST_CHUNK), **(params or {})}
        items: list[Obj] = []
        while True:
            page = await self.request("GET", path, params=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            query = {**query, "continue": token}

    async def patch(self, path: str, body: Any, patch_type: PatchType = "merge") -> Obj:
        return await self.request(
            "PATCH", path, body=body, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )

    async def post(self, path: str, body: Any, params: Mapping[str, str] | None = None) -> Obj:
        return await self.request("POST", path, body=body, params=params)

    async def evict(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """POST the policy/v1 Eviction. Never a DELETE, never a PDB bypass.

        The UID precondition makes the server answer 409 instead of evicting a different
        pod that took the same name (a StatefulSet replacement): kubectl sends none
        (kubectl pkg/drain/drain.go EvictPod), Karpenter does (terminator/eviction.go).
        """
        delete_options: dict[str, Any] = {}
        if uid:
            delete_options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            delete_options["gracePeriodSeconds"] = grace_period_seconds
        if dry_run:
            delete_options["dryRun"] = ["All"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        }
        params = {"dryRun": "All"} if dry_run else None
        path = api_path("v1", "pods", namespace=namespace, name=name, subresource="eviction")
        return await self.post(path, body, params=params)

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str]
    ) -> AsyncIterator[AsyncIterator[str]]:
        """A streaming GET (watch); yields an iterator of lines. No read timeout here:
        the watch loop applies its own idle timeout per line."""
        timeout = httpx2.Timeout(DEFAULT_TIMEOUT_SECONDS, read=None)
        req = self._http.build_request(
            "GET", path, params=dict(params), headers={"Accept": "application/json"},
            timeout=timeout,
        )
        try:
            resp = await self._http.send(req, stream=True)
        except httpx2.HTTPError as exc:
            raise TransportError(
                code=0, reason=type(exc).__name__, message=str(exc) or repr(exc),
                method="GET", path=path,
            ) from exc
        try:
            if resp.status_code >= 300:
                body = await resp.aread()
                error = error_from_response(
                    resp.status_code, resp.headers, body, method="GET", path=path
                )
                if error is not None:
                    raise error
            yield _lines(resp, path)
        finally:
            await resp.aclose()


async def _lines(resp: httpx2.Response, path: str) -> AsyncIterator[str]:
    try:
        async for line in resp.aiter_lines():
            if line.strip():
                yield line
    except httpx2.HTTPError as exc:
        raise TransportError(
            code=0, reason=type(exc).__name__, message=str(exc) or repr(exc),
            method="GET", path=path,
        ) from exc
