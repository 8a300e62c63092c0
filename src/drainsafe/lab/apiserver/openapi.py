"""A minimal OpenAPI v3 surface, so kubectl create/apply validate on the server side.

kubectl (1.27+) asks /openapi/v3 whether the server supports the fieldValidation query
parameter on PATCH for the object's group-version-kind (kubernetes/cli-runtime
pkg/resource/query_param_verifier_v3.go: a PATCH operation tagged with
x-kubernetes-group-version-kind that lists a `fieldValidation` query parameter). When it
does, kubectl skips client-side schema validation (which would need the full OpenAPI v2
schema) and sends fieldValidation=Strict. The lab serves exactly that: one PATCH
operation per kind, no schemas. The API server then checks fields itself
(drainsafe.lab.apiserver.schema: Strict refuses unknown fields with the real server's 400), and
kubectl apply computes its strategic merge patch from kubectl's built-in types. Without
this document kubectl create/apply fail with "failed to download openapi" unless
--validate=false is passed.

Custom resources also get their schemas (drainsafe.lab.apiserver.crd.openapi_schemas),
tagged with x-kubernetes-group-version-kind, as kube-apiserver publishes a CRD's
schema in its group-version document: that is what `kubectl explain` reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from drainsafe.lab.apiserver import discovery
from drainsafe.lab.apiserver.discovery import RESOURCES, ResourceType

SchemasOf = Callable[[ResourceType], dict[str, Any]]


def _no_schemas(rt: ResourceType) -> dict[str, Any]:
    return {}


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _gv_document(group: str, version: str, resources: Sequence[ResourceType],
                 schemas_of: SchemasOf) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for r in resources:
        if (r.group, r.version) != (group, version):
            continue
        schemas.update(schemas_of(r))
        base = "/" + _gv_path(group, version)
        item = (f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}" if r.namespaced
                else f"{base}/{r.plural}/{{name}}")
        paths[item] = {"patch": {
            "operationId": f"patch{r.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": group, "version": version,
                                                "kind": r.kind},
            "parameters": [
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": {"description": "OK"}},
        }}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes (drainsafe lab)",
                     "version": discovery.SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()


def document(path: str, resources: Sequence[ResourceType] = RESOURCES,
             schemas_of: SchemasOf = _no_schemas) -> dict[str, Any] | None:
    """The document for /openapi/v3 or /openapi/v3/<group-version path>; None: 404."""
    path = path.rstrip("/")
    if path == "/openapi/v3":
        return {"paths": {
            _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash="
                             f"{_hash(_gv_document(g, v, resources, schemas_of))}"}
            for g, v in discovery.group_versions(resources)}}
    for g, v in discovery.group_versions(resources):
        if path == f"/openapi/v3/{_gv_path(g, v)}":
            return _gv_document(g, v, resources, schemas_of)
    return None
