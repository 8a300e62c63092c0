"""The pods/proxy subresource: `/api/v1/namespaces/NS/pods/ID/proxy/PATH` to the pod's IP.

As kube-apiserver serves it (kubernetes/kubernetes v1.33):
- pkg/registry/core/pod/rest/subresources.go `ProxyREST`: methods GET, POST, PUT, PATCH,
  DELETE, HEAD, OPTIONS; the sub-path after `proxy` is joined onto the location, keeping a
  trailing slash (`net.JoinPreservingTrailingSlash`);
- pkg/registry/core/pod/strategy.go `ResourceLocation`: ID is `NAME`, `NAME:PORT` or
  `SCHEME:NAME:PORT` (apimachinery pkg/util/net/port_split.go `SplitSchemeNamePort`: scheme
  "", http or https, a non-empty name, else 400 "invalid pod request"); without a port, the
  first port declared by any container, else none (port 80 of the scheme); a pod without an
  IP is 400 "address not allowed". The port is used as given: a pod's named ports are not
  resolved here (only a Service's are);
- apimachinery pkg/util/proxy/transport.go: a backend that cannot be dialled is answered
  503 ServiceUnavailable "error trying to reach service: ..."; otherwise the backend's status,
  headers and body pass through, with the query string of the request.

The lab's pods live on loopback addresses, which the real server refuses to proxy to
(`IsProxyableIP`); the lab allows them, since they are its pod network.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from drainsafe.lab.apiserver import discovery
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.store import Store

METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_SCHEMES = frozenset({"", "http", "https"})
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate",
                         "proxy-authorization", "te", "trailer", "transfer-encoding",
                         "upgrade", "content-length", "host", "authorization"})
CONNECT_TIMEOUT_SECONDS = 5.0


def split_scheme_name_port(ident: str) -> tuple[str, str, str]:
    """SplitSchemeNamePort: (scheme, name, port), or a 400 for anything else."""
    parts = ident.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, (name, port) = "", parts
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        raise st.bad_request(f'invalid pod request "{ident}"')
    if not name or scheme not in _SCHEMES:
        raise st.bad_request(f'invalid pod request "{ident}"')
    return scheme, name, port


def location(pod: dict[str, object], scheme: str, port: str, sub_path: str) -> str:
    """The URL the request goes to (ResourceLocation + the joined sub-path)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if not port:
        for container in spec.get("containers") or []:
            ports = container.get("ports") or []
            if ports:
                port = str(ports[0].get("containerPort", ""))
                break
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    ips = status.get("podIPs") or []
    ip = str(ips[0].get("ip", "")) if ips else str(status.get("podIP") or "")
    if not ip:
        raise st.bad_request("address not allowed")
    host = f"[{ip}]" if ":" in ip else ip
    if port:
        host = f"{host}:{port}"
    path = posixpath.normpath("/" + sub_path.lstrip("/")) if sub_path else ""
    if path == "/.":
        path = "/"
    if sub_path.endswith("/") and not path.endswith("/"):
        path += "/"
    return f"{scheme or 'http'}://{host}{path}"


async def proxy(store: Store, request: Request, namespace: str, ident: str, sub_path: str
                ) -> Response:
    if request.method not in METHODS:
        raise st.method_not_allowed("the server does not allow this method on the requested "
                                    "resource")
    scheme, name, port = split_scheme_name_port(ident)
    pod = store.get(discovery.BY_KEY["pods"], namespace, name)
    url = location(pod, scheme, port, sub_path)
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
    content = await request.body()
    client = _client()
    upstream = client.build_request(request.method, url, params=request.url.query or None,
                                    headers=headers, content=content)
    try:
        response = await client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise st.StatusError(503, "ServiceUnavailable",
                             f"error trying to reach service: {exc or type(exc).__name__}"
                             ) from None
    passed = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await _close(response, client)

    return StreamingResponse(body(), status_code=response.status_code, headers=passed,
                             background=BackgroundTask(_close, response, client))


async def _close(response: httpx.Response, client: httpx.AsyncClient) -> None:
    await response.aclose()
    await client.aclose()


def _client() -> httpx.AsyncClient:
    """One per request (the proxy serves occasional reads, not load): no proxies from the
    environment, no redirects followed (the real proxy hands them back to the caller), the
    pod's certificate unchecked."""
    return httpx.AsyncClient(trust_env=False, follow_redirects=False, verify=False,
                             timeout=httpx.Timeout(30.0, connect=CONNECT_TIMEOUT_SECONDS))
