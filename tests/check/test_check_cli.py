"""The command: exit codes, output formats, config, explain, --diff/--fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from check_manifests import deployment, pdb, service, to_yaml

from drainsafe.cli import main

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parents[2] / "examples" / "manifests"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Config is looked up from the working directory: keep the repo's own out of the way.
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_examples_good_passes_and_naive_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(EXAMPLES / "good"))
    assert code == 0 and "no drain-safety findings" in out
    code, out, _ = run_cli(capsys, str(EXAMPLES / "naive"))
    assert code == 1
    for rule in ("grace-default", "server-aborts-on-sigterm", "prestop-missing", "pdb-wedge",
                 "liveness-on-readiness", "readiness-slow", "gpu-surge", "sidecar-ordering",
                 "signal-not-forwarded"):
        assert rule in out, rule
    assert "0s + 90s + 5s = 95s > 30s" in out  # the budget arithmetic


def test_demo_runs_both_examples_without_them_interfering(
        capsys: pytest.CaptureFixture[str]) -> None:
    # ./dev demo checks examples/manifests as a whole: good and naive must not see each other.
    code, out, _ = run_cli(capsys, "-o", "json", str(EXAMPLES))
    findings = json.loads(out)["findings"]
    assert code == 1
    assert {f["object"]["namespace"] for f in findings} == {"inference-naive"}
    assert "pdb-overlap" not in {f["rule"] for f in findings}


def test_json_output_shape_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "-o", "json", str(EXAMPLES / "naive"))
    assert code == 1
    data = json.loads(out)
    assert list(data) == ["findings"]
    first = data["findings"][0]
    assert list(first) == ["rule", "severity", "object", "file", "line", "message", "fix"]
    assert list(first["object"]) == ["kind", "namespace", "name"]
    schema = json.loads(resources.files("drainsafe.check").joinpath(
        "findings.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    wedge = next(f for f in data["findings"] if f["rule"] == "pdb-wedge")
    assert wedge["object"] == {"kind": "PodDisruptionBudget", "namespace": "inference-naive",
                               "name": "llm"}
    text = (EXAMPLES / "naive" / "inference.yaml").read_text().splitlines()
    assert text[wedge["line"] - 1].strip() == "minAvailable: 2"


def test_sarif_validates_against_official_schema(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "kind: [\n")
    code, out, _ = run_cli(capsys, "-o", "sarif", str(EXAMPLES / "naive"), bad)
    assert code == 2
    sarif = json.loads(out)
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(sarif)
    run = sarif["runs"][0]
    assert sarif["version"] == "2.1.0"
    assert {r["ruleId"] for r in run["results"]} >= {"pdb-wedge", "grace-default"}
    region = run["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] >= 1
    assert run["invocations"][0]["executionSuccessful"] is False
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])


def test_fail_on_and_disable(capsys: pytest.CaptureFixture[str]) -> None:
    naive = str(EXAMPLES / "naive")
    assert run_cli(capsys, "--fail-on", "none", naive)[0] == 0
    assert run_cli(capsys, "--fail-on", "error", naive)[0] == 1
    code, out, _ = run_cli(capsys, "-o", "json", "--fail-on", "error", "--disable",
                           "pdb-wedge,server-aborts-on-sigterm,signal-not-forwarded", naive)
    assert code == 0 and "pdb-wedge" not in out
    code, _, err = run_cli(capsys, "--fail-on", "fatal", naive)
    assert code == 2 and "--fail-on" in err
    code, _, err = run_cli(capsys, "--disable", "no-such-rule", naive)
    assert code == 2 and "no-such-rule" in err


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys)[0] == 2
    code, _, err = run_cli(capsys, "--cluster-version", "latest", str(EXAMPLES / "good"))
    assert code == 2 and "1.30" in err
    code, _, err = run_cli(capsys, "--max-request-seconds", "-3", str(EXAMPLES / "good"))
    assert code == 2 and "--max-request-seconds" in err


def test_explain_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--explain", "pdb-overlap")
    assert code == 0 and "500" in out and "eviction.go" in out
    code, _, err = run_cli(capsys, "--explain", "nope")
    assert code == 2 and "grace-budget" in err
    code, out, _ = run_cli(capsys, "--list-rules")
    assert code == 0 and "sidecar-ordering" in out


def test_config_file_and_pyproject(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = write(tmp_path, "d.yaml", to_yaml(deployment(grace=60), service(), pdb()))
    assert run_cli(capsys, "-o", "json", f)[0] == 0
    # Context from .drainsafe.yaml: a longest request of 90 s breaks the 60 s budget.
    write(tmp_path, ".drainsafe.yaml", "max-request-seconds: 90\n")
    code, out, _ = run_cli(capsys, "-o", "json", f)
    assert code == 1
    (tmp_path / ".drainsafe.yaml").unlink()
    # Found in a parent directory, from [tool.drainsafe] in pyproject.toml.
    write(tmp_path, "pyproject.toml", "[tool.drainsafe]\nmax-request-seconds = 90\n"
          "disable = ['grace-default']\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    import os
    os.chdir(sub)
    code, out, _ = run_cli(capsys, "-o", "json", f, "--max-grace-seconds", "30")
    rules = {x["rule"] for x in json.loads(out)["findings"]}
    assert "grace-exceeds-cap" in rules and "grace-default" not in rules
    assert run_cli(capsys, "--no-config", "-o", "json", f)[0] == 0
    write(tmp_path, ".drainsafe.yaml", "max-requst-seconds: 90\n")
    os.chdir(tmp_path)
    code, _, err = run_cli(capsys, f)
    assert code == 2 and "max-requst-seconds" in err and ".drainsafe.yaml" in err


def test_diff_and_fix_keep_comments_and_order(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    original = (
        "# deployed by hand\n"
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: web  # the API\n"
        "  annotations:\n"
        "    drainsafe.io/max-request-seconds: '90'\n"
        "spec:\n"
        "  replicas: 2\n"
        "  selector:\n"
        "    matchLabels: {app: web}\n"
        "  template:\n"
        "    metadata:\n"
        "      labels:\n"
        "        app: web\n"
        "    spec:\n"
        "      containers:\n"
        "        - name: server   # keep\n"
        "          image: example/server:1\n"
        "          lifecycle:\n"
        "            preStop:\n"
        "              sleep:\n"
        "                seconds: 10\n"
    )
    f = write(tmp_path, "web.yaml", original)
    code, out, _ = run_cli(capsys, "--diff", f)
    assert code == 1
    added = [line for line in out.splitlines() if line.startswith("+") and
             not line.startswith("+++")]
    removed = [line for line in out.splitlines() if line.startswith("-") and
               not line.startswith("---")]
    assert added == ["+      terminationGracePeriodSeconds: 105"] and removed == []
    assert Path(f).read_text() == original  # --diff writes nothing
    code, _, _err = run_cli(capsys, "--fix", f)
    fixed = Path(f).read_text()
    assert fixed.startswith("# deployed by hand\n") and "# the API" in fixed and "# keep" in fixed
    assert "terminationGracePeriodSeconds: 105" in fixed
    assert fixed.replace("      terminationGracePeriodSeconds: 105\n", "") == original
    # Fixed: the budget fits now.
    code, out, _ = run_cli(capsys, "-o", "json", f)
    assert "grace-default" not in out


def test_stdin_real_process(tmp_path: Path) -> None:
    text = to_yaml(deployment(grace=60, replicas=1), service())
    proc = subprocess.run([sys.executable, "-m", "drainsafe", "check", "-o", "json", "-"],
                          input=text.encode(), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    assert {f["file"] for f in findings} == {"<stdin>"}
    assert "single-replica" in {f["rule"] for f in findings}
    empty = subprocess.run([sys.executable, "-m", "drainsafe", "check", "-"], input=b"",
                           capture_output=True, timeout=60, check=False)
    assert empty.returncode == 2 and b"empty input" in empty.stderr


def test_real_process_ends_with_every_byte_written(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """Run as the program, check ends its process without the interpreter's teardown
    (shell.end_process): the output must still be whole, to a pipe and to a file, with the
    exit code the findings give."""
    naive = str(EXAMPLES / "naive")
    # Buffered, as a user's shell runs it (PYTHONUNBUFFERED would hide a lost buffer).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    for output in ("json", "sarif", "text"):
        code, expected, _ = run_cli(capsys, "--no-config", "-o", output, naive)
        assert code == 1 and expected
        piped = subprocess.run([sys.executable, "-m", "drainsafe", "check", "--no-config",
                                "-o", output, naive], capture_output=True, timeout=60,
                               check=False, env=env)
        assert (piped.returncode, piped.stdout.decode()) == (1, expected), piped.stderr
        with (tmp_path / f"out.{output}").open("wb") as handle:
            to_file = subprocess.run([sys.executable, "-m", "drainsafe", "check",
                                      "--no-config", "-o", output, naive], stdout=handle,
                                     timeout=60, check=False, env=env)
        assert to_file.returncode == 1
        assert (tmp_path / f"out.{output}").read_text() == expected


def test_fix_in_second_document_and_compact_sequences(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    second = (
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: api\n"
        "spec:\n"
        "  replicas: 3\n"
        "  selector:\n"
        "    matchLabels:\n"
        "      app: api\n"
        "  template:\n"
        "    metadata:\n"
        "      labels:\n"
        "        app: api\n"
        "    spec:\n"
        "      terminationGracePeriodSeconds: 30  # too short\n"
        "      containers:\n"
        "      - name: api\n"
        "        image: example/api:1\n"
        "        args: [\"--timeout-graceful-shutdown\", \"60\"]\n"
        "        command: [uvicorn, app:app]\n"
        "        lifecycle:\n"
        "          preStop:\n"
        "            sleep: {seconds: 10}\n"
    )
    original = to_yaml(service("api")) + "---\n" + second
    f = write(tmp_path, "two.yaml", original)
    _, out, _ = run_cli(capsys, "--diff", f)
    changed = [line for line in out.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-      terminationGracePeriodSeconds: 30  # too short",
                       "+      terminationGracePeriodSeconds: 75  # too short"]
    assert run_cli(capsys, "--fix", f)[0] == 1  # other findings (no PDB) remain
    assert Path(f).read_text() == original.replace("Seconds: 30  #", "Seconds: 75  #")
    # The exit code judges what is left: with only the budget error fixed, no error remains.
    g = write(tmp_path, "again.yaml", original)
    assert run_cli(capsys, "--fail-on", "error", g)[0] == 1
    assert run_cli(capsys, "--fix", "--fail-on", "error", g)[0] == 0


def test_fix_leaves_stdin_and_json_alone(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    f = write(tmp_path, "d.json", json.dumps(deployment(
        annotations={"drainsafe.io/max-request-seconds": "90"})))
    before = Path(f).read_text()
    code, _, err = run_cli(capsys, "--fix", f)
    assert Path(f).read_text() == before and "no safe automatic fixes" in err and code == 1


def test_text_in_a_pipe_is_what_rich_prints(tmp_path: Path) -> None:
    # Without colour the text report writes lines itself (issue 31); it must print what rich
    # printed: markup-like text kept literally, emoji codes replaced, tabs expanded, control
    # characters stripped (those lines go through rich).
    import io

    from rich.console import Console
    from rich.markup import escape

    from drainsafe.check import report
    from drainsafe.check.context import Context
    from drainsafe.check.engine import Result
    from drainsafe.check.findings import Finding, ObjectRef, Severity

    def finding(message: str, fix: str) -> Finding:
        return Finding("grace-budget", Severity.ERROR, ObjectRef("Deployment", "ns", "[web]"),
                       "f.yaml", 3, message, fix)

    cases = [("plain [bold]x[/] text", "spec:\n  a: [1]"), ("a :fire: b", "k: :fire:"),
             ("tab\there", "k:\tv"), ("bell\x07here", "k: v\x07"),
             # lines written together: a code is never matched across a line break
             ("ends :fire", "fire:\n:fire:\nk: :x"), ("two :fire::fire:", ":smile\n:")]
    for message, fix in cases:
        out = io.StringIO()
        report.text(Result(findings=[finding(message, fix)]), Context(), out)
        expected = io.StringIO()
        console = Console(file=expected, highlight=False, soft_wrap=True, width=200)
        console.print(f"[bold]{escape('Deployment ns/[web]')}[/]  [dim]f.yaml:3[/]")
        console.print(f"  [bold red]error  [/] [bold]grace-budget[/] [dim]line 3[/]  "
                      f"{escape(message)}")
        console.print("          fix:", style="dim")
        console.print(escape("\n".join("            " + x for x in fix.splitlines())),
                      style="green")
        console.print()
        assert out.getvalue().startswith(expected.getvalue()), (message, out.getvalue())
