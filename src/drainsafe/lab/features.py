"""Feature gates: the version-dependent behaviour a lab can switch, as kube-apiserver and
kube-controller-manager switch it with --feature-gates.

Each gate defaults to its state in the Kubernetes version the lab reports (v1.31,
drainsafe.lab.apiserver.discovery.SERVER_VERSION), from kubernetes/kubernetes
pkg/features/kube_features.go:

- MaxUnavailableStatefulSet (KEP-961): alpha since v1.24 (off), beta and on by default
  since v1.35. Off: the API server drops `spec.updateStrategy.rollingUpdate.maxUnavailable`
  from a StatefulSet that did not use it before (pkg/registry/apps/statefulset/strategy.go
  dropStatefulSetDisabledFields) and the controller replaces one pod at a time. On: the
  field defaults to 1 (pkg/apis/apps/v1/defaults.go SetDefaults_StatefulSet) and the
  controller replaces up to maxUnavailable pods at once
  (stateful_set_control.go updateStatefulSetAfterInvariantEstablished).

Gates that are on by default at v1.31 and that the lab simply follows (not switchable):
PodIndexLabel (the `apps.kubernetes.io/pod-index` label, beta since v1.28),
StatefulSetAutoDeletePVC (the defaulted persistentVolumeClaimRetentionPolicy, beta since
v1.27), StatefulSetStartOrdinal (spec.ordinals, beta since v1.27).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# --feature-gates names, as kube-apiserver and kube-controller-manager spell them.
_NAMES = {"MaxUnavailableStatefulSet": "max_unavailable_stateful_set"}


class UnknownFeatureGate(ValueError):
    """A --feature-gates entry the lab does not know or cannot parse."""


@dataclass(frozen=True)
class FeatureGates:
    max_unavailable_stateful_set: bool = False

    @classmethod
    def parse(cls, text: str) -> FeatureGates:
        """`Name=true,Other=false`, the --feature-gates syntax (component-base
        featuregate.Set); names the lab does not emulate are refused."""
        gates = cls()
        for entry in filter(None, (e.strip() for e in text.split(","))):
            name, _, value = entry.partition("=")
            field = _NAMES.get(name.strip())
            if field is None:
                raise UnknownFeatureGate(
                    f"unrecognized feature gate: {name.strip()} (the lab knows "
                    f"{', '.join(sorted(_NAMES))})")
            if value.strip().lower() not in ("true", "false"):
                raise UnknownFeatureGate(f"invalid value of {name.strip()}={value}, "
                                         "want true or false")
            gates = replace(gates, **{field: value.strip().lower() == "true"})
        return gates


DEFAULT = FeatureGates()
