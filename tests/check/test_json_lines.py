"""-o json and -o sarif write each finding directly: the same text as json.dumps of its
dict (Finding.to_json(), the SARIF result)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.check.findings import Finding, ObjectRef, Severity
from drainsafe.check.report import _sarif_result, json_lines, sarif_lines

texts = st.text(max_size=20)  # any code point: quotes, backslashes, controls, non-ASCII
findings = st.builds(
    Finding, rule=st.sampled_from(["grace-budget", "pdb-missing"]),
    severity=st.sampled_from(list(Severity)),
    object=st.builds(ObjectRef, texts, texts, texts), file=texts,
    line=st.integers(1, 10**7), message=texts, fix=texts)


@settings(max_examples=100, deadline=None)
@given(st.lists(findings, max_size=6))
def test_json_lines_match_json_dumps(items: list[Finding]) -> None:
    # Several findings share objects and files (the parts written once) when lists repeat.
    doubled = items + items[:2]
    assert json_lines(doubled) == [json.dumps(f.to_json()) for f in doubled]


@settings(max_examples=100, deadline=None)
@given(st.lists(findings, max_size=6), st.sampled_from([{}, {"grace-budget": 3}]))
def test_sarif_lines_match_json_dumps(items: list[Finding], index: dict[str, int]) -> None:
    doubled = items + items[:2]
    assert sarif_lines(doubled, index) == [
        json.dumps(_sarif_result(f, index, {})) for f in doubled]
