"""The node's cordon record, read for `drainsafe audit`: who owns a cordon is a typed value,
and audit's exit code follows it (not the text shown to people)."""

from __future__ import annotations

from typing import Any

import pytest

from drainsafe.drain import ownership


def node(*, cordoned: bool, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "g1", "annotations": annotations or {}},
            "spec": {"unschedulable": cordoned}}


@pytest.mark.parametrize(("cordoned", "annotations", "owned_by", "forgotten"), [
    (True, {ownership.CORDONED_BY: "drainsafe: ann@laptop",
            ownership.WAS_UNSCHEDULABLE: "false"}, "drainsafe", False),
    (True, {ownership.CORDONED_BY: "drainsafe: ann@laptop",
            ownership.WAS_UNSCHEDULABLE: "true"}, "before-drainsafe", True),
    (True, {}, "no-record", True),
    (False, {}, "none", False),
])
def test_who_owns_a_cordon(cordoned: bool, annotations: dict[str, str], owned_by: str,
                           forgotten: bool) -> None:
    record = ownership.audit_record(node(cordoned=cordoned, annotations=annotations), 3, 1)
    assert record.owned_by == owned_by
    assert record.forgotten is forgotten


def test_the_cordon_record_takes_its_time_from_the_caller() -> None:
    patch = ownership.cordon_patch(node(cordoned=False), actor="a", reason="r",
                                   progress=ownership.Progress(), now=0.0)
    assert patch["metadata"]["annotations"][ownership.CORDONED_AT] == "1970-01-01T00:00:00Z"
