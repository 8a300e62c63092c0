"""What drainsafe check loads before it reads its first file: its start-up is serial, on the
critical path of every run (issue 31), so modules only some runs need are imported there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from drainsafe.check.context import find_config

_PROBE = """
import sys
from drainsafe.cli import main
code = main(sys.argv[1:])
print("\\nloaded:", *sorted(m for m in ("yaml", "logging", "tomllib") if m in sys.modules))
sys.exit(code)
"""
GOOD = Path(__file__).parents[2] / "examples" / "manifests" / "good" / "inference.yaml"


def _modules_after(*argv: str, cwd: Path) -> tuple[int, str, set[str]]:
    """Run `drainsafe ARGV` in a fresh interpreter: its exit code, output, and which of
    PyYAML, logging and tomllib it loaded."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=60)
    output, _, loaded = proc.stdout.rpartition("\nloaded:")
    return proc.returncode, output, set(loaded.split())


def test_a_clean_run_loads_neither_pyyaml_logging_nor_tomllib(tmp_path: Path) -> None:
    # They were ~25 ms of check's serial start-up (issue 31); yaml-rs reads this input, it
    # has no finding to write a snippet for, and the project's pyproject.toml has no
    # drainsafe table to parse.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n[tool.ruff]\n')
    code, output, loaded = _modules_after("check", str(GOOD), "-o", "json", cwd=tmp_path)
    assert (code, json.loads(output)) == (0, {"findings": []})
    assert loaded == set()
    # The fallback reader still loads PyYAML where yaml-rs leaves the input (a tag).
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(GOOD.read_text().replace("replicas: 3", "replicas: !!int 3", 1))
    code, output, loaded = _modules_after("check", str(tagged), "-o", "json", cwd=tmp_path)
    assert (code, json.loads(output)) == (0, {"findings": []})
    assert loaded == {"yaml"}


def test_a_drainsafe_table_is_found_however_its_key_is_written(tmp_path: Path) -> None:
    # pyproject.toml is parsed only when its text can hold the key: plainly or escaped.
    pyproject = tmp_path / "pyproject.toml"
    for text in ("[tool.drainsafe]\n", '[tool."drain\\u0073afe"]\n',
                 '[tool]\n"drain\\U00000073afe" = {}\n', "[ tool . 'drainsafe' ]\n",
                 '[tool]\ndrainsafe = {fail-on = "error"}\n', "tool.drainsafe.fail-on = 'x'\n",
                 '"tool" = {drainsafe = {}}\n', '[project]\nname = "x"\n  [tool.drainsafe]\n'):
        pyproject.write_text(text)
        assert find_config(tmp_path) == pyproject, text
    for text in ("[tool.ruff]\n", '[tool."drain\\u0074afe"]\n', "[tool.drainsafe\n",
                 '[tool.ruff]\ndrainsafe = {}\n'):
        pyproject.write_text(text)
        assert find_config(tmp_path) is None, text


def test_a_project_naming_drainsafe_elsewhere_parses_no_toml(tmp_path: Path) -> None:
    # A project that depends on drainsafe, or is drainsafe, names it outside `tool`: its
    # pyproject.toml is not parsed (tomllib and the parse were ~3.5 ms of start-up).
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "drainsafe"\ndependencies = ["drainsafe>=1"]\n'
        '[project.scripts]\ndrainsafe = "drainsafe.cli:main"\n[tool.ruff]\n'
        'src = ["drainsafe"]\n')
    code, _, loaded = _modules_after("check", str(GOOD), "-o", "json", cwd=tmp_path)
    assert code == 0
    assert "tomllib" not in loaded
