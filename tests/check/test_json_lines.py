"""-o json and -o sarif write each finding directly: the same text as json.dumps of its
dict (Finding.to_json(), the SARIF result); written in pieces, the same document as
json.dumps of the whole."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.check.engine import Result
from drainsafe.check.findings import Finding, ObjectRef, Severity
from drainsafe.check.load import InputError
from drainsafe.check.report import (
    _sarif_result,
    json_lines,
    sarif_lines,
    to_json,
    to_sarif,
    write_json,
    write_sarif,
)
from drainsafe.check.rules import all_rules

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
    assert list(json_lines(doubled)) == [json.dumps(f.to_json()) for f in doubled]


@settings(max_examples=100, deadline=None)
@given(st.lists(findings, max_size=6), st.sampled_from([{}, {"grace-budget": 3}]))
def test_sarif_lines_match_json_dumps(items: list[Finding], index: dict[str, int]) -> None:
    doubled = items + items[:2]
    assert list(sarif_lines(doubled, index)) == [
        json.dumps(_sarif_result(f, index, {})) for f in doubled]


@settings(max_examples=60, deadline=None)
@given(st.lists(findings, max_size=9), st.integers(1, 3000), st.booleans())
def test_pieced_output_is_json_dumps_of_the_whole(items: list[Finding], piece: int,
                                                  errors: bool) -> None:
    # Any number of findings against any piece size (in characters): none, fewer than a
    # piece, whole pieces and a rest. The text is what one string of all lines gave, and
    # parses to the whole.
    result = Result(items, [InputError("a.yaml", 3, "bad")] if errors else [])
    out = io.StringIO()
    write_json(result, out, piece=piece)
    lines = [json.dumps(f.to_json()) for f in items]
    whole = ('{"findings": [\n  ' + ",\n  ".join(lines) + "\n]}\n" if lines
             else '{"findings": []}\n')
    assert out.getvalue() == whole
    assert json.loads(out.getvalue()) == to_json(result)

    rules = all_rules()
    out = io.StringIO()
    write_sarif(result, rules, out, piece=piece)
    sarif = to_sarif(result, rules)
    assert json.loads(out.getvalue()) == sarif
    # Byte for byte: the envelope as json.dumps(indent=2) writes it, each result on one line.
    envelope = json.dumps(to_sarif(result, rules, with_results=False), indent=2)
    results = [json.dumps(r) for r in sarif["runs"][0]["results"]]
    if results:
        inner = ",\n        ".join(results)
        envelope = envelope.replace('"results": []', f'"results": [\n        {inner}\n      ]')
    assert out.getvalue() == envelope + "\n"
