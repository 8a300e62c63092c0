"""The demo's timeline says what was drained (not "drainsafe verify")."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from drainsafe.demo.run import picture_title
from drainsafe.demo.scenario import ScenarioResult
from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import Record
from drainsafe.verify.timeline import render_png


def test_title_names_the_tool_the_node_and_the_pods() -> None:
    ours = ScenarioResult(tool="drainsafe", drain_aware=True, node="gpu-node-2", replicas=2)
    theirs = ScenarioResult(tool="kubectl", drain_aware=False, node="gpu-node-1", replicas=2)
    assert picture_title(ours) == ("drainsafe demo: drainsafe drain of node gpu-node-2 "
                                   "(2 replicas, drain-aware pods)")
    assert picture_title(theirs).startswith("drainsafe demo: kubectl drain of node gpu-node-1")
    assert picture_title(theirs).endswith("naive pods)")


def test_the_picture_carries_the_demo_title(tmp_path: Path) -> None:
    result = ScenarioResult(tool="drainsafe", drain_aware=True, node="gpu-node-2", replicas=2)
    run = LoadRun(LoadSpec(url="http://10.96.0.10/v1/completions", duration=2), 0.0,
                  [RequestResult(0.1, 1.1, Outcome(Kind.OK, 200))], 0, 2.0)
    png = render_png(Record.from_run(run, []), tmp_path / "t.png",
                     title=picture_title(result))
    with Image.open(png) as image:
        assert image.info["Title"] == picture_title(result)
