"""The timeline's title: "drainsafe verify" unless the caller (e.g. the demo) names it."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from drainsafe.verify.load import LoadRun, LoadSpec, RequestResult
from drainsafe.verify.outcome import Kind, Outcome
from drainsafe.verify.record import Record
from drainsafe.verify.timeline import render_html, render_png


def _record() -> Record:
    run = LoadRun(LoadSpec(url="http://127.0.0.1:9/v1/completions", duration=2), 0.0,
                  [RequestResult(0.1, 1.2, Outcome(Kind.OK, 200)),
                   RequestResult(1.0, 1.0, Outcome(Kind.REFUSED))], 0, 2.0)
    return Record.from_run(run, [])


def _png_title(path: Path) -> str:
    with Image.open(path) as image:
        return str(image.info["Title"])


def test_default_title_is_unchanged(tmp_path: Path) -> None:
    record = _record()
    png = render_png(record, tmp_path / "t.png")
    page = render_html(record, png, tmp_path / "t.html").read_text()
    assert _png_title(png) == "drainsafe verify"
    assert "<title>drainsafe verify</title>" in page and "<h1>drainsafe verify</h1>" in page


def test_a_caller_names_the_picture_and_the_page(tmp_path: Path) -> None:
    record = _record()
    title = "drainsafe demo: drainsafe drain of node gpu-1 <2 replicas>"
    png = render_png(record, tmp_path / "t.png", title=title)
    page = render_html(record, png, tmp_path / "t.html", title=title).read_text()
    assert _png_title(png) == title
    escaped = "drainsafe demo: drainsafe drain of node gpu-1 &lt;2 replicas&gt;"
    assert f"<title>{escaped}</title>" in page and f"<h1>{escaped}</h1>" in page
    assert "drainsafe verify" not in page
