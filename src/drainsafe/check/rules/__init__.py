"""The rules: `all_rules()` loads every rule module, each of which registers its rules in
drainsafe.check.rules.registry on import.

A rule is a pure function of the input's index and the context that yields findings.
Rule modules register themselves on import; `all_rules()` imports them in a fixed order.
"""

from __future__ import annotations

from drainsafe.check.rules.registry import REGISTRY, Rule, rule

__all__ = ["REGISTRY", "Rule", "all_rules", "rule"]


def all_rules() -> dict[str, Rule]:
    from drainsafe.check.rules import (  # noqa: F401
        disruption,
        groups,
        pods,
        probes,
        rollout,
        termination,
    )

    return REGISTRY
