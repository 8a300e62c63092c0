"""The lab's Kubernetes API server: a Starlette app over the Store.

URL layout, verbs, list/watch parameters and error bodies follow kubernetes/apiserver
pkg/endpoints (handlers/get.go, watch.go, create.go, update.go, patch.go, delete.go).
The wire format is JSON only (kubectl's protobuf Accept falls back to JSON). Watch
streams are newline-delimited WatchEvents; a too-old resourceVersion is answered with
200 and one ERROR event carrying a 410 Expired Status (cacher.go newErrWatcher).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import logging
import pathlib
import random
from collections.abc import AsyncIterator
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from drainsafe.lab.apiserver import apply as ssa
from drainsafe.lab.apiserver import crd, discovery, fields, openapi, podproxy, schema, table
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.admission_webhook import (
    WebhookDispatcher,
    eviction_attributes,
    warning_headers,
)
from drainsafe.lab.apiserver.discovery import ResourceType
from drainsafe.lab.apiserver.eviction import check_request, evict
from drainsafe.lab.apiserver.patch import APPLY_PATCH, apply_patch
from drainsafe.lab.apiserver.store import Event, Obj, Store, clone, meta
from drainsafe.lab.node.volumes import pod_dir
from drainsafe.labels import SelectorError
from drainsafe.labels import parse as parse_labels

log = logging.getLogger(__name__)
ANONYMOUS_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
DEFAULT_BOOKMARK_SECONDS = 5.0
LOG_FOLLOW_POLL_SECONDS = 0.2


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def json_response(obj: Any, code: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    return Response(dumps(obj), status_code=code, media_type="application/json",
                    headers=headers)


def status_response(err: st.StatusError) -> Response:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after else None
    return json_response(err.body(), err.code, headers)


# nginx's "client closed request": never seen by the client, which is gone.
CLIENT_CLOSED_REQUEST = 499


class ClientStream(StreamingResponse):
    """A long-lived stream (watch, log -f) that ends as soon as its client goes away.

    A client that disconnects is normal (a kubelet or kubectl stopping a watch, a client
    timeout), not a server error. Starlette only listens for the disconnect under ASGI
    spec < 2.4; under 2.4 an idle watch would hold its store watcher until the next event
    or its timeout (30-60 min), and the failed send surfaces as ClientDisconnect, which
    uvicorn logs as a traceback. So: always race the stream against http.disconnect,
    treat a send to a gone client as the end, and close the body iterator so its
    `finally` (store.unwatch) runs at once, not when the generator is garbage-collected.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with asyncio.TaskGroup() as tasks:
                streaming = tasks.create_task(self._stream_until_gone(send))
                listening = tasks.create_task(self.listen_for_disconnect(receive))
                streaming.add_done_callback(lambda _: listening.cancel())
                listening.add_done_callback(lambda _: streaming.cancel())
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _stream_until_gone(self, send: Send) -> None:
        try:
            await self.stream_response(send)
        except (OSError, ClientDisconnect) as exc:  # uvicorn's ClientDisconnected: OSError
            log.debug("stream client went away: %r", exc)


class ApiServer:
    """Routes Kubernetes API requests to the store. `app` is the ASGI application."""

    def __init__(self, store: Store, *, token: str | None, state_dir: pathlib.Path,
                 bookmark_seconds: float = DEFAULT_BOOKMARK_SECONDS) -> None:
        self.store = store
        self.token = token
        self.state_dir = state_dir
        self.bookmark_seconds = bookmark_seconds
        self.request_log: list[tuple[str, str]] | None = None
        self.crds = crd.CustomResources(store)  # before managedFields: they see its changes
        store.admission.append(lambda rt, obj, old: ssa.record(rt, obj, old, store.clock()))
        self.webhooks = WebhookDispatcher(store)
        self.app = Starlette(routes=[
            Route("/{path:path}", self._handle,
                  methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
        ])

    # ---- edge ----------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        if self.request_log is not None:
            self.request_log.append((request.method, str(request.url.path) +
                                     (f"?{request.url.query}" if request.url.query else "")))
        try:
            if self.token is not None and path not in ANONYMOUS_PATHS:
                self._authenticate(request)
            return await self._route(request, path)
        except st.StatusError as err:
            return status_response(err)
        except ClientDisconnect:
            # Gone while sending its body: nothing was read, so nothing was written;
            # the response goes nowhere (uvicorn drops sends to a closed connection).
            log.debug("%s %s: client went away mid-request", request.method, path)
            return Response(status_code=CLIENT_CLOSED_REQUEST)

    def _authenticate(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), str(self.token).encode()):
            raise st.unauthorized()

    async def _route(self, request: Request, path: str) -> Response:
        if path in ("/healthz", "/livez", "/readyz"):
            return Response(b"ok", media_type="text/plain")
        if path == "/version":
            return json_response(discovery.SERVER_VERSION)
        if path == "/api":
            return json_response(discovery.api_versions())
        if path == "/apis":
            return json_response(discovery.api_group_list(self.crds.discoverable()))
        if path == "/openapi/v2":
            # kubectl <= 1.27 insists on fetching the v2 document (as protobuf) before
            # apply; an empty body is a valid, empty openapi_v2.Document, so kubectl
            # finds no schemas and falls back to its built-in types (see openapi.py).
            return Response(b"", media_type="application/octet-stream")
        if path.startswith("/openapi/"):
            doc = openapi.document(path, self.crds.discoverable(), self._openapi_schemas)
            if doc is None:
                raise st.StatusError(404, "NotFound", "the server could not find the "
                                     "requested resource")
            return json_response(doc)
        segs = [s for s in path.split("/") if s]
        if segs[0] == "api" and len(segs) >= 2:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis" and len(segs) >= 2:
            if len(segs) == 2:
                doc = discovery.api_group(segs[1], self.crds.discoverable())
                if doc is None:
                    raise _page_not_found()
                return json_response(doc)
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise _page_not_found()
        if not rest:
            doc = discovery.api_resource_list(group, version, self.crds.discoverable())
            if doc is None:
                raise _page_not_found()
            return json_response(doc)
        response = await self._resource(request, group, version, rest)
        parts = rest[1:] if rest[0] == "watch" else rest
        rt = self._lookup(group, version, parts[2] if parts[0] == "namespaces"
                          and len(parts) > 2 else parts[0]) if parts else None
        found = self.crds.version(rt) if rt is not None else None
        if found is not None and found[1].warning:
            _warned(response, [found[1].warning])  # a deprecated version of a custom kind
        return response

    def _openapi_schemas(self, rt: ResourceType) -> dict[str, Any]:
        found = self.crds.version(rt)
        return {} if found is None else crd.openapi_schemas(*found)

    def _lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The served type; a custom kind only while its CRD's names are accepted."""
        rt = self.store.catalog.lookup(group, version, plural)
        if rt is not None and self.store.catalog.is_custom(rt) and not self.crds.serving(rt):
            return None
        return rt

    # ---- resource paths ------------------------------------------------------------

    async def _resource(self, request: Request, group: str, version: str,
                        segs: list[str]) -> Response:
        watch_path = segs[0] == "watch"
        if watch_path:
            segs = segs[1:]
        namespace: str | None = None
        if (len(segs) >= 3 and segs[0] == "namespaces"
                and (rt3 := self._lookup(group, version, segs[2])) is not None
                and rt3.namespaced):
            namespace, segs = segs[1], segs[2:]
        rt = self._lookup(group, version, segs[0]) if segs else None
        if rt is discovery.BY_KEY["pods"] and namespace and len(segs) >= 3 \
                and segs[2] == "proxy" and not watch_path:
            # The sub-path is everything after .../proxy, trailing slash kept.
            _, _, sub_path = request.url.path.partition(f"/pods/{segs[1]}/proxy")
            return await podproxy.proxy(self.store, request, namespace, segs[1], sub_path)
        if request.method == "OPTIONS":
            raise st.method_not_allowed("the server does not allow this method on the "
                                        "requested resource")
        if rt is None or len(segs) > 3:
            raise _page_not_found()
        name = segs[1] if len(segs) > 1 else None
        sub = segs[2] if len(segs) > 2 else None
        if sub is not None and rt.subresource(sub) is None:
            raise _page_not_found()
        if rt.namespaced and name is not None and namespace is None:
            raise _page_not_found()
        q = request.query_params
        method = request.method
        dry_run = q.get("dryRun") == "All"
        if method in ("GET", "HEAD"):
            if name is None:
                if watch_path or q.get("watch") in ("true", "1"):
                    return self._watch(request, rt, namespace)
                return self._list(request, rt, namespace)
            if watch_path:
                return self._watch(request, rt, namespace, name=name)
            if sub == "scale":
                return json_response(self._scale_of(rt, self.store.get(rt, namespace or "",
                                                                        name)))
            if sub == "log":
                return self._log(request, namespace or "", name)
            obj = self.crds.present(rt, self.store.get(rt, namespace or "", name))
            return self._render(request, rt, [obj], single=True)
        ctype = request.headers.get("content-type", "application/merge-patch+json")
        if method == "PATCH" and ctype.split(";")[0].strip().lower() == APPLY_PATCH:
            return self._apply(request, rt, namespace, name, sub, await _yaml_body(request),
                               dry_run)
        body = await _body(request) if method != "DELETE" else await _optional_body(request)
        directive = q.get("fieldValidation") or "Warn"
        writer = ssa.Writer(rt.key, namespace or "" if rt.namespaced else "",
                            name or "", ssa.manager_from(q.get("fieldManager"),
                                                         request.headers.get("user-agent")),
                            sub)
        if method == "POST":
            if name is None:
                obj = _object(body, rt)
                warnings = _check_fields(rt, obj, directive, decoding=True,
                                         custom=self._pruner(rt))
                m = meta(obj)
                writer = ssa.Writer(rt.key, (namespace or m.get("namespace") or "default")
                                    if rt.namespaced else "", m.get("name") or "",
                                    writer.manager)
                with ssa.writing(writer):
                    created = self.store.create(rt, obj, namespace=namespace, dry_run=dry_run)
                return _warned(json_response(self.crds.present(rt, created), 201), warnings)
            if sub == "eviction":
                return await self._evict(namespace or "", name, _dict(body), dry_run)
            if sub == "binding":
                return self._bind(namespace or "", name, _dict(body), dry_run)
            raise st.method_not_allowed("the server does not allow this method on the "
                                        "requested resource")
        if name is None:
            if method == "DELETE":
                return self._delete_collection(request, rt, namespace, _dict(body or {}))
            raise st.method_not_allowed("the server does not allow this method on the "
                                        "requested resource")
        if method == "PUT":
            obj = _object(body, rt) if sub != "scale" else _dict(body)
            warnings = _check_fields(rt, obj, directive, decoding=True,
                                     custom=self._pruner(rt)) if sub is None else []
            with ssa.writing(writer):
                put = self._put(rt, namespace or "", name, sub, obj, dry_run)
            return _warned(json_response(put if sub == "scale" else self.crds.present(rt, put)),
                           warnings)
        if method == "PATCH":
            with ssa.writing(writer):
                patched, warnings = self._patch(rt, namespace or "", name, sub, ctype, body,
                                                dry_run, directive)
            if sub != "scale":
                patched = self.crds.present(rt, patched)
            return _warned(json_response(patched), warnings)
        if method == "DELETE":
            return self._delete(request, rt, namespace or "", name, _dict(body or {}))
        raise st.method_not_allowed("method not allowed")

    async def _evict(self, namespace: str, name: str, body: dict[str, Any],
                     dry_run: bool) -> Response:
        _, dry = check_request(name, body, query_dry_run=dry_run)
        warnings = await self.webhooks.validate(
            eviction_attributes(namespace, name, body, dry_run=dry))
        try:
            code, result = evict(self.store, namespace, name, body, query_dry_run=dry_run)
            response = json_response(result, code)
        except st.StatusError as err:
            response = status_response(err)
        for value in warning_headers(warnings):
            response.headers.append("Warning", value)
        return response

    def _pruner(self, rt: ResourceType) -> crd.Pruner | None:
        if self.crds.version(rt) is None:
            return None
        return lambda obj, drop: self.crds.unknown_fields(rt, obj, drop=drop)

    def _table(self, rt: ResourceType, objs: list[Obj], list_meta: dict[str, Any]
               ) -> dict[str, Any] | None:
        found = self.crds.version(rt)
        if found is not None:
            return crd.table(found[1], objs, list_meta, self.store.clock())
        return table.render(rt, objs, list_meta, now=self.store.clock())

    def _scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        found = self.crds.version(rt)
        if found is not None and found[1].scale is not None:
            return crd.scale_of(found[0], found[1].scale, obj)
        return scale_of(obj)

    def _set_replicas(self, rt: ResourceType, obj: Obj, replicas: Any) -> None:
        found = self.crds.version(rt)
        if found is not None and found[1].scale is not None:
            crd.validate_scale(replicas, meta(obj)["name"])
            crd.set_replicas(found[1].scale, obj, replicas)
        else:
            obj.setdefault("spec", {})["replicas"] = replicas

    def _render(self, request: Request, rt: ResourceType, objs: list[Obj], *,
                single: bool = False, list_meta: dict[str, Any] | None = None) -> Response:
        if table.wants_table(request.headers.get("accept", "")):
            tbl = self._table(rt, objs, list_meta or {})
            if tbl is not None:
                return json_response(tbl)
        if single:
            return json_response(objs[0])
        return json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                              "metadata": list_meta or {}, "items": objs})

    # ---- list and watch ------------------------------------------------------------

    def _list(self, request: Request, rt: ResourceType, namespace: str | None) -> Response:
        q = request.query_params
        labels, flds = _selectors(q.get("labelSelector"), q.get("fieldSelector"), rt.plural)
        items, rv = self.store.list(rt, namespace, labels=labels, fields=flds)
        if self.crds.kind(rt) is not None:
            items = [self.crds.present(rt, o) for o in items]
        list_meta: dict[str, Any] = {"resourceVersion": str(rv)}
        start = _decode_continue(q.get("continue")) if q.get("continue") else None
        if start is not None:
            list_meta["resourceVersion"] = str(start[0])
            after = (start[1], start[2])
            items = [o for o in items
                     if (meta(o).get("namespace", ""), meta(o)["name"]) > after]
        limit = _int_param(q.get("limit"), "limit")
        if limit and limit > 0 and len(items) > limit:
            last = items[limit - 1]
            list_meta["continue"] = _encode_continue(
                int(list_meta["resourceVersion"]), meta(last).get("namespace", ""),
                meta(last)["name"])
            list_meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return self._render(request, rt, items, list_meta=list_meta)

    def _watch(self, request: Request, rt: ResourceType, namespace: str | None,
               name: str | None = None) -> Response:
        q = request.query_params
        labels, flds = _selectors(q.get("labelSelector"), q.get("fieldSelector"), rt.plural)
        if name is not None:
            flds = fields.parse(",".join(filter(None, [q.get("fieldSelector"),
                                                       f"metadata.name={name}"])), rt.plural)
        rv_text = q.get("resourceVersion") or ""
        since = None if rv_text in ("", "0") else _int_param(rv_text, "resourceVersion")
        timeout = _int_param(q.get("timeoutSeconds"), "timeoutSeconds")
        if timeout is None:
            timeout = random.randint(1800, 3599)  # [1x, 2x) MinRequestTimeout (get.go)
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        as_table = table.wants_table(request.headers.get("accept", ""))
        try:
            w = self.store.watch(rt, since, namespace)
        except st.StatusError as err:
            error = dumps({"type": "ERROR", "object": err.body()}) + b"\n"

            async def once() -> AsyncIterator[bytes]:
                yield error

            return ClientStream(once(), media_type="application/json")

        store, interval = self.store, self.bookmark_seconds
        custom = self.crds.version(rt) is not None

        def frame(ev: Event) -> bytes | None:
            kind = _transition(ev, labels, flds)
            if kind is None:
                return None
            obj: Any = self.crds.present(rt, clone(ev.obj)) if custom else ev.obj
            if as_table:
                obj = self._table(rt, [obj], {}) or obj
            return dumps({"type": kind, "object": obj}) + b"\n"

        async def stream() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            try:
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return
                    try:
                        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a
                        # cancellation that races a ready event, and the disconnect
                        # handling (ClientStream) ends a watch by cancelling it.
                        async with asyncio.timeout(min(remaining, interval)):
                            ev = await w.queue.get()
                    except TimeoutError:
                        if bookmarks and loop.time() < deadline:
                            yield dumps({"type": "BOOKMARK", "object": {
                                "kind": rt.kind, "apiVersion": rt.api_version,
                                "metadata": {"resourceVersion": str(store.resource_version)},
                            }}) + b"\n"
                        continue
                    if ev is None:
                        return
                    # A backlog is read without blocking and uvicorn's send does not
                    # block either: yield to the loop per event, so other requests run
                    # and a client's disconnect is seen before the whole backlog is sent.
                    await asyncio.sleep(0)
                    data = frame(ev)
                    if data is not None:
                        yield data
            finally:
                store.unwatch(w)

        return ClientStream(stream(), media_type="application/json")

    # ---- writes --------------------------------------------------------------------

    def _put(self, rt: ResourceType, namespace: str, name: str, sub: str | None, obj: Obj,
             dry_run: bool) -> Obj:
        if sub == "scale":
            current = self.store.get(rt, namespace, name)
            replicas = _dict(obj.get("spec") or {}).get("replicas", 0)
            rv = meta(obj).get("resourceVersion")
            if rv:
                current["metadata"]["resourceVersion"] = rv
            self._set_replicas(rt, current, replicas)
            return self._scale_of(rt, self.store.update(rt, current, dry_run=dry_run))
        if meta(obj).get("name", name) != name:
            raise st.bad_request("the name of the object "
                                 f"({meta(obj).get('name')}) does not match the name on "
                                 f"the URL ({name})")
        meta(obj)["name"] = name
        if rt.namespaced:
            if meta(obj).get("namespace", namespace) != namespace:
                raise st.bad_request("the namespace of the provided object does not "
                                     "match the namespace sent on the request")
            meta(obj)["namespace"] = namespace
        return self.store.update(rt, obj, subresource=sub, dry_run=dry_run)

    def _patch(self, rt: ResourceType, namespace: str, name: str, sub: str | None,
               ctype: str, patch: Any, dry_run: bool, directive: str
               ) -> tuple[Obj, list[str]]:
        current = self.store.get(rt, namespace, name)
        if self.crds.kind(rt) is not None and \
                ctype.split(";")[0].strip().lower() == crd.STRATEGIC_MERGE:
            raise crd.strategic_merge_refused()
        if sub == "scale":
            patched = apply_patch(ctype, self._scale_of(rt, current), patch)
            self._set_replicas(rt, current, _dict(patched.get("spec") or {}).get("replicas", 0))
            return self._scale_of(rt, self.store.update(rt, current, dry_run=dry_run)), []
        patched = apply_patch(ctype, clone(current), patch)
        warnings = _check_fields(rt, patched, directive, decoding=False,
                                 custom=self._pruner(rt))
        pm = meta(patched)
        # A patch may carry a resourceVersion as a precondition; otherwise it applies to
        # the version just read (patch.go retries on conflict; here reads are atomic).
        if not pm.get("resourceVersion"):
            pm["resourceVersion"] = current["metadata"]["resourceVersion"]
        pm["name"] = name
        if rt.namespaced:
            pm["namespace"] = namespace
        return self.store.update(rt, patched, subresource=sub, dry_run=dry_run), warnings

    def _apply(self, request: Request, rt: ResourceType, namespace: str | None,
               name: str | None, sub: str | None, applied: Any, dry_run: bool) -> Response:
        """PATCH application/apply-patch+yaml: server-side apply (see lab/apiserver/apply.py)."""
        if name is None or sub is not None:
            raise st.method_not_allowed("the server does not allow this method on the "
                                        "requested resource")
        applied = _object(applied, rt)
        m = meta(applied)
        if m.get("name", name) != name:
            raise st.bad_request(f"the name of the object ({m.get('name')}) does not match "
                                 f"the name on the URL ({name})")
        if rt.namespaced and m.get("namespace", namespace) != namespace:
            raise st.bad_request("the namespace of the provided object does not match the "
                                 "namespace sent on the request")
        q = request.query_params
        manager = q.get("fieldManager") or ""
        force = q.get("force") in ("true", "1")
        if self.crds.kind(rt) is not None:
            unknown = self.crds.unknown_fields(rt, applied, drop=False)
            if unknown:  # the typed patch object is built from the CRD's schema
                raise st.bad_request(
                    f"failed to create typed patch object ({rt.api_version}, Kind={rt.kind}): "
                    f".{unknown[0]}: field not declared in schema")
        live = self.store.peek(rt, namespace or "", name)
        merged = ssa.apply(rt, clone(live) if live is not None else None, applied, manager,
                           force=force, now=self.store.clock())
        mm = meta(merged)
        mm["name"] = name
        if live is None:
            if rt.namespaced:
                mm["namespace"] = namespace
            return json_response(self.crds.present(rt, self.store.create(
                rt, merged, namespace=namespace, dry_run=dry_run)), 201)
        mm["resourceVersion"] = live["metadata"]["resourceVersion"]
        return json_response(self.crds.present(rt, self.store.update(rt, merged,
                                                                     dry_run=dry_run)))

    def _delete(self, request: Request, rt: ResourceType, namespace: str, name: str,
                opts: dict[str, Any]) -> Response:
        q = request.query_params
        grace = opts.get("gracePeriodSeconds")
        if q.get("gracePeriodSeconds") is not None:
            grace = _int_param(q.get("gracePeriodSeconds"), "gracePeriodSeconds")
        propagation = q.get("propagationPolicy") or opts.get("propagationPolicy")
        if opts.get("orphanDependents") is True or q.get("orphanDependents") == "true":
            propagation = "Orphan"
        dry_run = q.get("dryRun") == "All" or "All" in (opts.get("dryRun") or [])
        obj = self.store.delete(rt, namespace, name, grace_period=grace,
                                preconditions=opts.get("preconditions"),
                                propagation=propagation, dry_run=dry_run)
        # apiserver pkg/endpoints/handlers/delete.go: 200 with the object, also while it
        # stays (a graceful pod deletion, finalizers pending); 202 only when not deleted
        # at once and the client sent orphanDependents=false
        orphan_false = opts.get("orphanDependents") is False \
            or q.get("orphanDependents") == "false"
        still_there = not dry_run and self.store.peek(rt, namespace, name) is not None
        return json_response(obj, 202 if still_there and orphan_false else 200)

    def _delete_collection(self, request: Request, rt: ResourceType, namespace: str | None,
                           opts: dict[str, Any]) -> Response:
        q = request.query_params
        labels, flds = _selectors(q.get("labelSelector"), q.get("fieldSelector"), rt.plural)
        items, _ = self.store.list(rt, namespace, labels=labels, fields=flds)
        gone = []
        for o in items:
            m = meta(o)
            try:
                gone.append(self.store.delete(rt, m.get("namespace", ""), m["name"],
                                              grace_period=opts.get("gracePeriodSeconds")))
            except st.StatusError as err:
                if err.code != 404:
                    raise
        return json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                              "metadata": {"resourceVersion":
                                           str(self.store.resource_version)},
                              "items": gone})

    def _bind(self, namespace: str, name: str, binding: dict[str, Any],
              dry_run: bool) -> Response:
        target = _dict(binding.get("target") or {})
        node = target.get("name")
        if not node:
            raise st.invalid("Binding", name, [("target.name", "Required value")])
        from drainsafe.lab.controllers.scheduler import bind_pod

        bind_pod(self.store, namespace, name, str(node), dry_run=dry_run)
        return json_response(st.success(201), 201)

    def _log(self, request: Request, namespace: str, name: str) -> Response:
        pod = self.store.get(discovery.BY_KEY["pods"], namespace, name)
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        container = request.query_params.get("container")
        if container is None:
            if len(containers) != 1:
                raise st.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(str(c) for c in containers)}]")
            container = str(containers[0])
        elif container not in containers:
            raise st.bad_request(f"container {container} is not valid for pod {name}")
        path = pod_dir(self.state_dir, namespace, name, str(pod["metadata"].get("uid"))) \
            / f"{container}.log"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise st.bad_request(f'container "{container}" in pod "{name}" is waiting to '
                                 "start: ContainerCreating") from None
        offset = len(data)
        tail = _int_param(request.query_params.get("tailLines"), "tailLines")
        if tail is not None and tail >= 0:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail else b""
        if request.query_params.get("follow") not in ("true", "1"):
            return Response(data, media_type="text/plain")
        uid = pod["metadata"]["uid"]
        store = self.store

        async def follow() -> AsyncIterator[bytes]:
            # A file has no change feed here, so new output is polled; the stream ends
            # when the pod is gone (or replaced), as the kubelet's log stream does.
            nonlocal offset
            yield data
            while True:
                await asyncio.sleep(LOG_FOLLOW_POLL_SECONDS)
                with contextlib.suppress(OSError), path.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
                    if chunk:
                        offset += len(chunk)
                        yield chunk
                current = store.peek(discovery.BY_KEY["pods"], namespace, name)
                if current is None or current["metadata"]["uid"] != uid:
                    return

        return ClientStream(follow(), media_type="text/plain")


# ---- helpers --------------------------------------------------------------------------

def scale_of(obj: Obj) -> Obj:
    """An autoscaling/v1 Scale for a Deployment or ReplicaSet."""
    m = obj["metadata"]
    sel = obj.get("spec", {}).get("selector") or {}
    from drainsafe.labels import format_selector

    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                       "creationTimestamp") if k in m},
        "spec": {"replicas": obj.get("spec", {}).get("replicas", 0)},
        "status": {"replicas": obj.get("status", {}).get("replicas", 0),
                   "selector": format_selector(sel.get("matchLabels") or {})},
    }


def _transition(ev: Event, labels: Any, flds: fields.FieldSelector) -> str | None:
    """The event a selector-filtered watcher sees (watch filtering in the cacher)."""
    def ok(o: Obj | None) -> bool:
        return o is not None and labels.matches(o["metadata"].get("labels")) and \
            flds.matches(o)

    new_ok = ok(ev.obj)
    if ev.type == "ADDED":
        return "ADDED" if new_ok else None
    if ev.type == "DELETED":
        return "DELETED" if new_ok else None
    old_ok = ok(ev.old)
    if new_ok and old_ok:
        return "MODIFIED"
    if new_ok:
        return "ADDED"
    if old_ok:
        return "DELETED"
    return None


def _selectors(label_text: str | None, field_text: str | None, resource: str
               ) -> tuple[Any, fields.FieldSelector]:
    try:
        labels = parse_labels(label_text)
    except SelectorError as exc:
        raise st.bad_request(f"unable to parse requirement: {exc}") from None
    return labels, fields.parse(field_text, resource)


def _int_param(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise st.bad_request(f"invalid value for {name}: {text!r}") from None


def _encode_continue(rv: int, namespace: str, name: str) -> str:
    return base64.urlsafe_b64encode(dumps({"v": "lab", "rv": rv, "start": [namespace, name]})
                                    ).decode()


def _decode_continue(token: str | None) -> tuple[int, str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(str(token)))
        return int(data["rv"]), str(data["start"][0]), str(data["start"][1])
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error):
        raise st.bad_request("continue key is not valid: incorrect encoded start "
                             "resourceVersion (version meta.k8s.io/v1)") from None


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise st.bad_request(f"the request body is not valid JSON: {exc}") from None


async def _optional_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise st.bad_request(f"the request body is not valid JSON: {exc}") from None


class _ManifestLoader(yaml.SafeLoader):
    """YAML as the API server reads it into JSON: a timestamp stays a string."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


async def _yaml_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return yaml.load(raw, Loader=_ManifestLoader)
    except yaml.YAMLError as exc:
        raise st.bad_request(f"error decoding YAML: {exc}") from None


def _check_fields(rt: ResourceType, obj: Obj, directive: str, *, decoding: bool,
                  custom: crd.Pruner | None = None) -> list[str]:
    """Unknown fields under fieldValidation (handlers/create.go, update.go, patch.go):
    Strict refuses the request; Warn (the default) returns one warning per field; Warn
    and Ignore drop them from `obj`. A custom resource's are those its schema prunes."""
    if directive == "Strict":
        found = custom(obj, False) if custom else schema.unknown_fields(rt, obj)
        unknown = [f'unknown field "{path}"' for path in found]
    else:  # decoding into the Go type drops them
        dropped = custom(obj, True) if custom else schema.drop_unknown_fields(rt, obj)
        unknown = [] if directive == "Ignore" else [f'unknown field "{p}"' for p in dropped]
    if not unknown or directive != "Strict":
        return unknown
    strict = "strict decoding error: " + ", ".join(unknown)
    if decoding:  # transformDecodeError
        raise st.bad_request(f"{rt.kind} in version {json.dumps(rt.version)} cannot be "
                             f"handled as a {rt.kind}: {strict}")
    raise st.bad_request(strict)


def _warned(response: Response, warnings: list[str]) -> Response:
    """One `Warning: 299 - "<text>"` header per warning (filters/warning.go)."""
    for text in warnings:
        response.headers.append("Warning", f"299 - {json.dumps(text)}")
    return response


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise st.bad_request("the request body must be a JSON object")
    return value


def _object(body: Any, rt: ResourceType) -> Obj:
    obj = _dict(body)
    kind = obj.get("kind")
    if kind and kind != rt.kind:
        raise st.bad_request(f"the body kind {kind!r} does not match the resource "
                             f"{rt.plural!r} (kind {rt.kind!r})")
    return obj


def _page_not_found() -> st.StatusError:
    return st.StatusError(404, "NotFound", "the server could not find the requested resource",
                          details={})

