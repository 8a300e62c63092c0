"""The install (deploy/, the guard's kustomize base and the drain's role) passes drainsafe's
own check: the project's manifests follow the advice it gives (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drainsafe.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_drainsafe_check_deploy_finds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(ROOT / "deploy"), "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["findings"] == [], report
