"""The LeaderWorkerSet CustomResourceDefinition (leaderworkerset.x-k8s.io/v1), as lws v0.10.0
serves it, written for the lab (not copied from lws's generated YAML).

From kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go (v0.10.0): the
kubebuilder markers on LeaderWorkerSet give the status subresource, the scale subresource
(specpath .spec.replicas, statuspath .status.replicas, selectorpath .status.hpaPodSelector),
the short name `lws` and the printer columns Ready, Desired, Up-to-date, Age; the field
markers give the defaults (replicas 1, size 1, restartPolicy RecreateGroupOnPodRestart,
startupPolicy LeaderCreated, rolloutStrategy.type RollingUpdate, partition 0, maxUnavailable
1, maxSurge 0) and enums used here. The pod templates are kept whole
(x-kubernetes-preserve-unknown-fields) instead of lws's full PodTemplateSpec schema: the
lab's pod validation checks pods when the StatefulSets create them. subGroupPolicy,
networkConfig and volumeClaimTemplates are accepted (preserved) but not acted on
(drainsafe.lab.controllers.leaderworkerset says what the lab follows).
"""

from __future__ import annotations

from typing import Any

GROUP = "leaderworkerset.x-k8s.io"
PLURAL = "leaderworkersets"
NAME = f"{PLURAL}.{GROUP}"
KEY = f"{GROUP}/{PLURAL}"  # the lab store's key for the resource

_TEMPLATE: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_INT_OR_STRING: dict[str, Any] = {"x-kubernetes-int-or-string": True}

_SPEC: dict[str, Any] = {
    "type": "object", "required": ["leaderWorkerTemplate"],
    "properties": {
        "replicas": {"type": "integer", "format": "int32", "default": 1,
                     "description": "Number of leader-workers groups."},
        "startupPolicy": {"type": "string", "default": "LeaderCreated",
                          "enum": ["LeaderCreated", "LeaderReady"]},
        "leaderWorkerTemplate": {
            "type": "object", "required": ["workerTemplate"],
            "properties": {
                "leaderTemplate": _TEMPLATE,
                "workerTemplate": _TEMPLATE,
                "size": {"type": "integer", "format": "int32", "default": 1},
                "restartPolicy": {"type": "string", "default": "RecreateGroupOnPodRestart",
                                  "enum": ["Default", "RecreateGroupOnPodRestart", "None"]},
                "subGroupPolicy": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True},
                "volumeClaimTemplates": {"type": "array", "items": _TEMPLATE},
            }},
        "rolloutStrategy": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "default": "RollingUpdate",
                         "enum": ["RollingUpdate"]},
                "rollingUpdateConfiguration": {
                    "type": "object",
                    "properties": {
                        "partition": {"type": "integer", "format": "int32", "default": 0},
                        "maxUnavailable": {**_INT_OR_STRING, "default": 1},
                        "maxSurge": {**_INT_OR_STRING, "default": 0}}}}},
        "networkConfig": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }}

_CONDITION: dict[str, Any] = {
    "type": "object", "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "reason": {"type": "string"}, "message": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"}}}

_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "conditions": {"type": "array", "items": _CONDITION},
        "readyReplicas": {"type": "integer", "format": "int32"},
        "updatedReplicas": {"type": "integer", "format": "int32"},
        "replicas": {"type": "integer", "format": "int32"},
        "hpaPodSelector": {"type": "string"}}}


def leaderworkerset_crd() -> dict[str, Any]:
    """A fresh copy of the CRD manifest."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "leaderworkerset",
                      "kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList",
                      "shortNames": ["lws"]},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.hpaPodSelector"}},
                "additionalPrinterColumns": [
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
                     "description": "Number of ready replicas"},
                    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas",
                     "description": "Number of desired replicas"},
                    {"name": "Up-to-date", "type": "integer",
                     "jsonPath": ".status.updatedReplicas",
                     "description": "Number of up-to-date replicas"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "LeaderWorkerSet is the Schema for the leaderworkersets API",
                    "properties": {"apiVersion": {"type": "string"},
                                   "kind": {"type": "string"},
                                   "metadata": {"type": "object"},
                                   "spec": _SPEC, "status": _STATUS}}},
            }],
        },
    }
