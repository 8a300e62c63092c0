"""The demo's pictures: pod lanes that start at creation and serve only while Ready and in
the endpoints; the timeline says which run it is; the capacity figure holds every run."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from drainsafe.demo.report import RunReport, render_capacity, render_html
from drainsafe.demo.run import picture_title
from drainsafe.demo.scenario import ScenarioResult
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import LifecycleEvent, Record
from drainsafe.verify.timeline import (
    EXITED,
    SERVING,
    STARTING,
    TERMINATING,
    pod_lanes,
    render_png,
)

# The case: a replacement created at t=2 and Ready at 6.1 is not serving before.
EVENTS = [
    LifecycleEvent(0.0, "ready", "llm-abc-old1", "Ready before the run"),
    LifecycleEvent(1.9, "terminating", "llm-abc-old1"),
    LifecycleEvent(2.0, "pod_added", "llm-abc-new1"),
    LifecycleEvent(2.1, "endpoint_not_ready", "llm-abc-old1"),
    LifecycleEvent(4.9, "exited", "llm-abc-old1", "server exit 137 (Error)"),
    LifecycleEvent(5.0, "deleted", "llm-abc-old1"),
    LifecycleEvent(6.1, "ready", "llm-abc-new1"),
    LifecycleEvent(7.0, "not_ready", "llm-abc-new1"),
    LifecycleEvent(7.5, "ready", "llm-abc-new1"),
    LifecycleEvent(1.0, "drain_started", "node-0"),
]


def test_lanes_start_at_creation_and_serve_only_while_ready_and_in_endpoints() -> None:
    old, new = pod_lanes(EVENTS, end=10.0)
    assert old.segments == ((SERVING, 0.0, 1.9), (TERMINATING, 1.9, 4.9), (EXITED, 4.9, 5.0))
    assert new.first == 2.0
    assert new.segments == ((STARTING, 2.0, 6.1), (SERVING, 6.1, 7.0),
                            ("not serving", 7.0, 7.5), (SERVING, 7.5, 10.0))


def test_an_endpoint_taken_out_ends_serving_before_termination() -> None:
    [lane] = pod_lanes([LifecycleEvent(0.0, "ready", "p-a-b"),
                        LifecycleEvent(1.0, "endpoint_not_ready", "p-a-b"),
                        LifecycleEvent(3.0, "terminating", "p-a-b")], end=4.0)
    assert lane.segments == ((SERVING, 0.0, 1.0), ("not serving", 1.0, 3.0),
                             (TERMINATING, 3.0, 4.0))


def result(node: str, history: list[tuple[float, int]], record: Record | None = None,
           ) -> ScenarioResult:
    r = ScenarioResult(tool="kubectl", drain_aware=False, node=node, replicas=2, ok=10,
                       lowest_ready=min(c for _, c in history), drain_at=1.0,
                       ready_history=history, record=record)
    r.causes = {"refused/reset": 3}
    r.seconds_below_desired = 4.1
    return r


def test_timeline_and_capacity_pictures_and_the_page(tmp_path: Path) -> None:
    run = LoadRun(LoadSpec(url="http://127.96.0.10/v1/completions", duration=10), 0.0,
                  [RequestResult(0.1, 1.1, Outcome(Kind.OK, 200))], 0, 10.0)
    record = Record.from_run(run, EVENTS)
    naive = RunReport("kubectl drain (naive)", "the race", result(
        "node-0", [(0.0, 2), (1.9, 1), (6.1, 2)], record))
    ours = RunReport("drainsafe drain", "nothing lost",
                     result("node-1", [(0.0, 2), (6.0, 3), (9.0, 2)]))
    title = picture_title(naive.name, naive.result)
    assert title == "drainsafe demo: kubectl drain (naive), drain of node node-0 (2 replicas)"
    png = render_png(record, tmp_path / "t.png", title=title)
    with Image.open(png) as image:
        assert image.info["Title"] == title
    naive.timeline = png
    capacity = render_capacity([naive, ours], tmp_path / "capacity.png", scale=10)
    assert capacity.stat().st_size > 10_000
    page = render_html([naive, ours], tmp_path / "report.html", scale=10, capacity=capacity,
                       notes=["run 4: not run"],
                       transcripts=[("kubectl drain (naive)", ["$ drainsafe audit",
                                                               "No cordoned nodes."])]
                       ).read_text()
    assert "1 s here is 10 s of the real thing" in page
    assert "<th>kubectl drain (naive)</th><th>drainsafe drain</th>" in page
    assert "<th>lowest Ready replicas</th><td>1/2</td><td>2/2</td>" in page
    assert page.count("data:image/png;base64,") == 2 and "run 4: not run" in page
    assert "<pre>$ drainsafe audit\nNo cordoned nodes.</pre>" in page
