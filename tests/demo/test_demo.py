"""`drainsafe demo`, the README's main command, end to end: real labs, real processes, the
real kubectl, and the report opened in Debian's headless chromium.

The suite's only full demo run (about 90 s): one module-scoped run, read by each test.
Its terminal is a pseudo-terminal, as a user's is, so the live view is what a user sees.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drainsafe.demo import controller
from drainsafe.demo.measure import RACE, SIGKILL
from drainsafe.demo.names import CONTROLLER, DRAINSAFE, NAIVE, SEEDS
from drainsafe.demo.scenario import kubectl_binary

# The run is about 90 s on a shared 2-core machine (112 s beside two busy processes); the
# suite's 120 s default would cut it on a busier one. The demo's own budget is asserted
# apart (under 3 minutes).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420),
              pytest.mark.skipif(kubectl_binary() is None, reason="kubectl not installed")]

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


@dataclass
class Demo:
    code: int
    results: list[dict[str, Any]]
    terminal: str
    first_progress: float | None  # seconds from start to the live view's first line
    seconds: float
    out: Path

    def run(self, name: str) -> dict[str, Any]:
        return next(r for r in self.results if r["name"] == name)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    out = tmp_path_factory.mktemp("demo") / "out"
    master, slave = pty.openpty()
    chunks: list[tuple[float, bytes]] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "drainsafe", "demo", "--out", str(out), "-o", "json"],
        stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
    os.close(slave)

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed its end
                return
            if not data:
                return
            chunks.append((time.monotonic() - started, data))

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        stdout, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    reader.join(5)
    os.close(master)
    terminal = b"".join(c for _, c in chunks).decode(errors="replace")
    first = next((t for t, c in chunks if b"drainsafe demo, " in c), None)
    return Demo(proc.returncode, json.loads(stdout or b"[]"), terminal, first, seconds, out)


def test_it_shows_progress_at_once_and_finishes(demo: Demo) -> None:
    assert demo.code == 0, demo.terminal[-4000:]
    # The live view is up within 2 s of the start (a machine shared by 7 runs is slow to
    # import; the view starts before the lab code loads).
    assert demo.first_progress is not None and demo.first_progress < 2.0, demo.first_progress
    assert "time-scaled: 1 s here is 10 s of the real thing" in demo.terminal
    assert "not run: the drainsafe controller is not in this build" in demo.terminal \
        or any(r["name"].endswith("controller") for r in demo.results)
    print(f"demo took {demo.seconds:.1f} s")
    assert demo.seconds < 180, demo.seconds  # the budget for ./dev demo


def test_naive_kubectl_drain_loses_requests_to_the_race_and_sigkill_and_drops_capacity(
        demo: Demo) -> None:
    naive = demo.run(NAIVE)
    assert naive["failed"].get(RACE, 0) >= 1, naive
    assert naive["failed"].get(SIGKILL, 0) >= 1, naive
    assert naive["truncated"] >= naive["failed"][SIGKILL]
    assert naive["min_ready"] < naive["replicas"] == 2, naive
    assert naive["seconds_below_desired"] > 0, naive


def test_the_seeds_settings_end_the_race_and_sigkill_but_not_the_dip(demo: Demo) -> None:
    seeds = demo.run(SEEDS)
    assert seeds["failed"].get(RACE, 0) == 0 and seeds["failed"].get(SIGKILL, 0) == 0, seeds
    assert seeds["truncated"] == 0, seeds
    assert seeds["min_ready"] < seeds["replicas"] == 2, seeds
    # The replacement is created at the eviction and loads its model meanwhile.
    assert seeds["seconds_below_desired"] >= seeds["full_capacity_lower_bound_seconds"] - 1.5


def test_drainsafe_drain_loses_nothing_and_never_drops_below_desired(demo: Demo) -> None:
    ours = demo.run(DRAINSAFE)
    assert ours["ok"] >= 50 and ours["failed"] == {} and ours["truncated"] == 0, ours
    assert ours["min_ready"] >= ours["replicas"] == 2, ours
    assert ours["seconds_below_desired"] == 0, ours
    assert ours["exit_code"] == 0, ours


def test_the_rows_hold_together(demo: Demo) -> None:
    for r in demo.results:
        assert r["shown"] and r["missing"] == [], r
        # The lower bounds are bounds: nothing measured below them.
        assert r["drain_seconds"] >= r["drain_lower_bound_seconds"], r
        capacity = r["full_capacity_seconds"]
        assert capacity is not None and capacity >= r["full_capacity_lower_bound_seconds"], r
        # Every drain leaves its node cordoned; the demo lifts it with drainsafe uncordon.
        assert r["left_cordoned"], r
    assert demo.terminal.count("No cordoned nodes.") == len(demo.results)
    assert json.loads((demo.out / "results.json").read_text()) == demo.results
    for name in ("capacity.png", "timeline-1.png", "timeline-2.png", "timeline-3.png"):
        assert (demo.out / name).stat().st_size > 10_000, name


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (./dev setup as root)")
def test_the_report_renders_in_chromium_with_the_runs_numbers(demo: Demo) -> None:
    assert CHROMIUM is not None
    page = (demo.out / "report.html").resolve()
    with tempfile.TemporaryDirectory(prefix="drainsafe-chromium-") as profile:
        done = subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
             page.as_uri()], capture_output=True, timeout=120, check=False)
        shot = Path(profile) / "shot.png"
        subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                        f"--screenshot={shot}", "--window-size=1300,2000", page.as_uri()],
                       capture_output=True, timeout=120, check=False)
        assert shot.exists() and shot.stat().st_size > 20_000  # it painted
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    dom = done.stdout.decode()
    found = re.search(r'<table id="results">.*?</table>', dom, re.S)
    assert found is not None, dom[:2000]
    table = found.group(0)
    header = re.findall(r"<th>([^<]*)</th>", table)
    assert [r["name"] for r in demo.results] == [
        h.replace("&#x27;", "'").replace("&#39;", "'") for h in header[1:1 + len(demo.results)]]

    def row(name: str) -> list[str]:
        match = re.search(rf"<tr><th>{re.escape(name)}</th>(.*?)</tr>", table)
        assert match is not None, name
        return re.findall(r"<td[^>]*>([^<]*)</td>", match.group(1))

    assert row("requests ok") == [str(r["ok"]) for r in demo.results]
    assert row("  refused/reset") == [str(r["failed"].get(RACE, 0)) for r in demo.results]
    assert row("lowest Ready replicas") == [f"{r['min_ready']}/{r['replicas']}"
                                            for r in demo.results]
    assert dom.count("data:image/png;base64,") == 1 + len(demo.results)
    assert dom.count("No cordoned nodes.") == len(demo.results)  # each drain's cordon lifted


@pytest.mark.skipif(bool(controller.missing()), reason=controller.missing() or "")
def test_kubectl_drain_under_the_controller_loses_nothing(demo: Demo) -> None:
    guarded = demo.run(CONTROLLER)
    assert guarded["failed"] == {} and guarded["truncated"] == 0, guarded
    assert guarded["min_ready"] >= guarded["replicas"] == 2, guarded
    assert guarded["seconds_below_desired"] == 0, guarded
