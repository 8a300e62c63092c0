"""Bad input as a careful user or an attacker writes it (issue 18): every case ends in a clear
error naming the input, never a traceback, a hang or a false clean result."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from check_manifests import container, deployment, to_yaml

from drainsafe.check import load
from drainsafe.check.context import Context
from drainsafe.check.engine import run
from drainsafe.cli import main


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def _single(tmp_path: Path) -> str:
    """A file with a finding of its own (single-replica), to see that it is still checked."""
    return _write(tmp_path / "other.yaml", to_yaml(deployment("other", replicas=1)))


def test_deep_json_is_an_input_error_and_other_files_are_still_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = _write(tmp_path / "deep.json",
                  '{"kind": "Deployment", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    code, out, err = _cli(capsys, deep, _single(tmp_path))
    assert code == 2
    assert f"error: {deep}: JSON nested deeper than 1,000 levels" in err
    assert "Traceback" not in err and "RecursionError" not in err
    assert "single-replica" in out  # the other file's finding is not lost


@pytest.mark.parametrize("value", ["inf", "1e400", "abc", "-5", "nan", "-inf", "1e12"])
@pytest.mark.parametrize("key", ["drainsafe.io/max-request-seconds",
                                 "drainsafe.io/shutdown-seconds"])
def test_bad_seconds_annotation_names_object_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str) -> None:
    f = _write(tmp_path / "a.yaml", to_yaml(deployment(
        "web", annotations={key: value},
        containers=[container(command=["uvicorn", "app:app"])])))
    code, _, err = _cli(capsys, f)
    assert code == 2, err
    assert f"Deployment default/web: metadata.annotations.{key}:" in err
    assert repr(value) in err and "number of seconds" in err
    assert "Traceback" not in err


def test_bad_annotation_on_the_pod_template_is_named_there(tmp_path: Path) -> None:
    obj = deployment("web")
    obj["spec"]["template"]["metadata"]["annotations"] = {
        "drainsafe.io/max-request-seconds": "soon"}
    result = run([_write(tmp_path / "a.yaml", to_yaml(obj))], Context())
    [error] = result.errors
    assert ("spec.template.metadata.annotations.drainsafe.io/max-request-seconds"
            in error.message)
    assert error.line == 14  # the annotation's own line


def _bad(tmp_path: Path, obj: dict[str, Any]) -> tuple[int, str]:
    f = _write(tmp_path / "a.yaml", to_yaml(obj))
    result = run([f], Context())
    return result.exit_code(Context()), "\n".join(str(e) for e in result.errors)


def test_replicas_not_a_number_is_an_error_not_a_clean_result(tmp_path: Path) -> None:
    obj = deployment("web")
    obj["spec"]["replicas"] = "two"
    code, errors = _bad(tmp_path, obj)
    assert code == 2
    assert "a.yaml:29: Deployment default/web: spec.replicas: expected an integer, got 'two'" \
        in errors


def test_replicas_null_is_the_default_one(tmp_path: Path) -> None:
    obj = deployment("web")
    obj["spec"]["replicas"] = None
    result = run([_write(tmp_path / "a.yaml", to_yaml(obj))], Context())
    assert not result.errors
    assert any(f.rule == "single-replica" for f in result.findings)


def test_containers_a_string_is_an_error(tmp_path: Path) -> None:
    obj = deployment("web")
    obj["spec"]["template"]["spec"]["containers"] = "a string"
    code, errors = _bad(tmp_path, obj)
    assert code == 2
    assert ("Deployment default/web: spec.template.spec.containers: expected a list of "
            "containers, got 'a string'") in errors


def test_negative_grace_is_an_error(tmp_path: Path) -> None:
    code, errors = _bad(tmp_path, deployment("web", grace=-5))
    assert code == 2
    assert ("spec.template.spec.terminationGracePeriodSeconds: must be between 0 and "
            in errors) and "got -5" in errors


def test_hpa_min_replicas_not_a_number_is_an_error(tmp_path: Path) -> None:
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                    "minReplicas": "1", "maxReplicas": 3}}
    code, errors = _bad(tmp_path, hpa)
    assert code == 2 and "spec.minReplicas: expected an integer, got '1'" in errors


def test_fifo_in_a_directory_is_skipped_with_a_note(tmp_path: Path) -> None:
    manifests = tmp_path / "deploy"
    manifests.mkdir()
    (manifests / "app.yaml").write_text(to_yaml(deployment("web", replicas=1)))
    os.mkfifo(manifests / "pipe.yaml")
    # A subprocess with a timeout: before the fix the walk blocked in open() forever.
    proc = subprocess.run([sys.executable, "-m", "drainsafe", "check", str(manifests)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert f"note: {manifests / 'pipe.yaml'}: skipped: a FIFO, not a regular file" in proc.stderr
    assert "single-replica" in proc.stdout
    assert proc.returncode == 1  # the finding; the note is not an input error


def test_symlink_loop_argument_is_named_as_such(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    result = run([str(a)], Context())
    assert [str(e) for e in result.errors] == [
        f"{a}: symbolic link loop (too many levels of symbolic links)"]
    broken = tmp_path / "broken.yaml"
    broken.symlink_to(tmp_path / "gone.yaml")
    result = run([str(broken)], Context())
    assert "broken symbolic link to" in str(result.errors[0])


def test_oversize_stdin_does_not_claim_a_size_it_did_not_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "MAX_INPUT_BYTES", 1024 * 1024)
    stdin = io.BytesIO(b"# padding\n" * 300_000)  # 3 MiB, of which 1 MiB is read
    result = run(["-"], Context(), stdin)
    [error] = result.errors
    assert str(error) == "<stdin>: input is over the 1 MiB limit; split it"


def test_oversize_file_states_its_size_and_the_limit(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    with f.open("wb") as handle:  # sparse: the size is what counts, nothing is read
        handle.truncate(load.MAX_INPUT_BYTES + 1)
    result = run([str(f)], Context())
    assert str(result.errors[0]) == (
        f"{f}: input is 8.0 MiB (8,388,609 bytes), above the 8 MiB limit; split it")


def test_inputs_beyond_the_run_total_are_named_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "MAX_TOTAL_BYTES", 2000)
    files = [_write(tmp_path / f"f{i}.yaml", to_yaml(deployment(f"d{i}"))) for i in range(6)]
    result = run(files, Context())
    refused = [e for e in result.errors if "limit of one run" in e.message]
    assert refused and {e.file for e in refused} <= set(files)
    assert result.documents + len(refused) == len(files)


def test_fix_keeps_crlf_line_endings(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    text = to_yaml(deployment("web", grace=10, annotations={
        "drainsafe.io/max-request-seconds": "90"})).replace("\n", "\r\n")
    f = tmp_path / "crlf.yaml"
    f.write_bytes(text.encode())
    f.chmod(0o640)
    code, _, err = _cli(capsys, "--fix", str(f))
    assert f"fixed {f}" in err, err
    data = f.read_bytes()
    assert b"terminationGracePeriodSeconds: 105\r\n" in data
    assert data.count(b"\r\n") == data.count(b"\n")  # every line still CRLF
    assert f.stat().st_mode & 0o777 == 0o640
    assert code in (0, 1)


def test_text_output_in_a_pipe_does_not_follow_columns(tmp_path: Path) -> None:
    f = _write(tmp_path / "a.yaml", to_yaml(deployment("web", replicas=1)))
    proc = subprocess.run([sys.executable, "-m", "drainsafe", "check", f], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env={**os.environ, "COLUMNS": "30"})
    assert "inputs  objects checked  errors  warnings  infos  input errors" in proc.stdout


def test_huge_seconds_flag_is_a_usage_error(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = _write(tmp_path / "a.yaml", to_yaml(deployment("web")))
    code, _, err = _cli(capsys, "--max-request-seconds", "1e300", f)
    assert code == 2
    assert "--max-request-seconds: must be at most 2,147,483,647, got '1e300'" in err
