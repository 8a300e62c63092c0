"""A large input checked in worker processes (check.parallel) says exactly what the serial run
says: the same findings in the same order, the same input errors naming file:line, the same
counts; namespaces that straddle two workers' files, relations across files, the whole
input's workload count, bad files among good ones."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
from check_manifests import container, deployment, hpa, lws, pdb, service, to_yaml

from drainsafe.check import parallel, report
from drainsafe.check.context import Context
from drainsafe.check.engine import Rendered, Result
from drainsafe.check.findings import Severity
from drainsafe.check.load import InputError, SourceText, expand_paths, read_input
from drainsafe.check.model import UNTOLD, Index
from drainsafe.check.parallel import run
from drainsafe.check.rules import all_rules
from drainsafe.failpoint import ENV, Action


def _fleet(apps: int, *, namespaced: bool = True) -> list[dict[str, Any]]:
    """Apps of every kind of relation the rules follow, three apps per namespace, so that a
    namespace's objects fall in two files (and two workers' shares)."""
    objects: list[dict[str, Any]] = []
    for i in range(apps):
        ns = f"team-{i // 3}" if namespaced else "default"
        name = f"app-{i}"
        if i % 7 == 3:
            objects.append(lws(name, namespace=ns))
            continue
        if i % 7 == 5:
            objects.append({"apiVersion": "batch/v1", "kind": "CronJob",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {
                                "template": {"spec": {"containers": [container()]}}}}}})
            continue
        objects.append(deployment(
            name, namespace=ns, replicas=1 + i % 3, grace=None if i % 2 else 5,
            annotations=None if i % 2 else {"drainsafe.io/shutdown-seconds": "60"},
            containers=[container(gpus=i % 2, pre_stop=None if i % 4 == 0 else
                                  {"sleep": {"seconds": 10}})],
            strategy={"type": "RollingUpdate",
                      "rollingUpdate": {"maxSurge": i % 2, "maxUnavailable": 1}}))
        objects.append(service(name, namespace=ns, type="NodePort" if i % 5 == 0 else "ClusterIP",
                               etp="Local" if i % 5 == 0 else None))
        if i % 3 == 0:
            objects.append(pdb(name, namespace=ns, min_available=1 + i % 3))
        elif i % 3 == 1:  # a typo: selects nothing (its message counts every workload)
            objects.append(pdb(name, namespace=ns, selector={"app": f"{name}x"}))
        if i % 4 == 1:
            scaler = hpa(name, namespace=ns, min_replicas=1)
            if i % 8 == 1:  # its finding is about it, found while checking the Deployment
                scaler["metadata"]["annotations"] = {"drainsafe.io/ignore": "single-replica"}
            objects.append(scaler)
    return objects


def _write(directory: Path, objects: list[dict[str, Any]], per_file: int = 10) -> list[Path]:
    directory.mkdir(exist_ok=True)
    files = []
    for n in range(0, len(objects), per_file):
        path = directory / f"part-{n // per_file:03d}.yaml"
        path.write_text(to_yaml(*objects[n:n + per_file]))
        files.append(path)
    return files


def _all_of(result: Result) -> tuple[Any, ...]:
    return ([dataclasses.astuple(f) for f in result.findings], result.errors, result.notes,
            result.documents, result.inputs, result.checked)


@pytest.fixture
def small_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers for any input: the tests' inputs are small."""
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 1)


def _blind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files cut by size alone, as if their namespaces could not be guessed from the
    text: namespaces then straddle the shares, and what the workers hold decides."""
    monkeypatch.setattr(parallel, "_namespaces", lambda source: set())


def _shares(args: list[str], jobs: int) -> list[parallel.Share] | None:
    names = expand_paths(args)[0]
    return parallel.shares(parallel._Input(names, [os.path.getsize(n) for n in names]), jobs)


def _cut_inside(args: list[str], jobs: int) -> bool:
    """Whether the shares cut a file between two of its documents."""
    cut = _shares(args, jobs)
    return cut is not None and any(
        isinstance(s, SourceText) and s.text != read_input(s.name).text
        for share in cut for s in share)


def _lines(rendered: Rendered | None) -> list[str]:
    """The lines of rendered output, as written (parallel.run's default separator, a line
    break, is in no json or sarif line)."""
    assert rendered is not None
    result = Result(rendered=rendered)
    text = "".join(t if isinstance(t, str) else str(t, "utf-8")
                   for t in result.texts(rendered.by, rendered.separator, size=100))
    return text.split(rendered.separator) if text else []


def _names(share: parallel.Share) -> set[str]:
    return {s if isinstance(s, str) else s.name for s in share if not isinstance(s, InputError)}


@pytest.mark.usefixtures("small_is_large")
@pytest.mark.parametrize("parent_share", [1e9, 0.0], ids=["parent-checks-straddling",
                                                           "workers-read-everything"])
def test_workers_write_the_serial_runs_lines(tmp_path: Path, parent_share: float,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """json and sarif lines written by the workers that made the findings, joined by the
    parent with those it made itself (the straddling namespaces' files), are the serial
    run's lines; the exit code's severities are all of theirs."""
    monkeypatch.setattr(parallel, "PARENT_SHARE", parent_share)
    _write(tmp_path / "fleet", _fleet(60))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    counts = {s: sum(1 for f in serial.findings if f.severity == s) for s in Severity}
    assert all(counts.values())
    for renderer in (report.json_lines, report.sarif_renderer(all_rules())):
        expected = list(renderer(serial.findings))
        for blind in (False, True):
            if blind:  # namespaces straddle: the parent or every worker reads them
                _blind(monkeypatch)
            for jobs in (2, 3):
                result = run(args, Context(), jobs=jobs, renderer=renderer)
                assert result.rendered is not None and result.findings == []
                assert _lines(result.rendered) == expected
                assert result.rendered.severities == counts
                for threshold in Severity:
                    context = Context(fail_on=threshold)
                    assert result.failed(context) == serial.failed(context)
                with pytest.raises(ValueError, match="another output"):
                    next(result.texts(report.json_lines if renderer is not report.json_lines
                                      else report.sarif_renderer(all_rules()), "\n"))
                with pytest.raises(ValueError, match="another output"):
                    next(result.texts(renderer, report.JSON_SEPARATOR))


@pytest.mark.usefixtures("small_is_large")
@pytest.mark.parametrize("namespaced", [True, False])
@pytest.mark.parametrize("parent_share", [1e9, 0.0], ids=["parent-checks-straddling",
                                                           "workers-read-everything"])
def test_workers_say_what_the_serial_run_says(tmp_path: Path, namespaced: bool,
                                              parent_share: float,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "PARENT_SHARE", parent_share)
    _write(tmp_path / "fleet", _fleet(60, namespaced=namespaced))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    assert len(serial.findings) > 100
    assert {"pdb-selects-nothing", "pdb-missing", "grace-budget", "lws-pdb-missing"} <= {
        f.rule for f in serial.findings}
    # Cut where no namespace straddles (none such without namespaces: one process)...
    assert (_shares(args, 2) is not None) == namespaced
    for jobs in (2, 3, 8):
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)
    # ...and where the guess was wrong: by size alone.
    _blind(monkeypatch)
    for jobs in (2, 3, 8):
        assert _shares(args, jobs) is not None
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)


def _spread(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects dealt out so that every file of _write holds many namespaces, as a
    fleet's generated manifests often are (no cut of the files keeps a namespace whole)."""
    return [o for r in range(7) for o in objects[r::7]]


def _checked_by_namespace(args: list[str], jobs: int) -> bool:
    """Whether check.parallel checks this input in workers that each read every file's
    documents of their namespaces (else in one process)."""
    names, errors = expand_paths(args)
    sources = [read_input(n) for n in names]
    return parallel._by_namespace(sources, names, errors, [], Context(), jobs,
                                  None) is not None


@pytest.mark.usefixtures("small_is_large")
def test_workers_by_namespace_say_what_the_serial_run_says(tmp_path: Path) -> None:
    _write(tmp_path / "fleet", _spread(_fleet(60)))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    assert _shares(args, 2) is None
    expected = {renderer: list(renderer(serial.findings))
                for renderer in (report.json_lines, report.sarif_renderer(all_rules()))}
    for jobs in (2, 3, 8):
        assert _checked_by_namespace(args, jobs)
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)
        for renderer, lines in expected.items():
            rendered = run(args, Context(), jobs=jobs, renderer=renderer).rendered
            assert _lines(rendered) == lines


@pytest.mark.usefixtures("small_is_large")
def test_an_object_not_where_its_text_says_leaves_it_to_one_process(tmp_path: Path) -> None:
    """A namespace key before the object's own (its metadata written last) misleads the
    split: the worker that reads it sees the object's real namespace is not one of its
    own, and the input is checked in one process, with the same findings."""
    files = _write(tmp_path / "fleet", _spread(_fleet(60)))
    files[-1].write_text(files[-1].read_text() + (
        "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\n"
        "spec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n"
        "      app: app-0\n      namespace: elsewhere\n"
        "metadata:\n  name: app-0-decoy\n  namespace: team-0\n"))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    fell_back = 0
    for jobs in (2, 3, 8):
        fell_back += not _checked_by_namespace(args, jobs)
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)
    assert fell_back  # "elsewhere" went to another worker than team-0 at least once


@pytest.mark.usefixtures("small_is_large")
def test_input_errors_spread_over_namespaces_leave_it_to_one_process(tmp_path: Path) -> None:
    """Input errors are said in the serial reading's order, and a YAML error ends its
    file's reading there: inputs with any are checked in one process."""
    files = _write(tmp_path / "fleet", _spread(_fleet(60)))
    args = [str(tmp_path / "fleet")]
    assert _checked_by_namespace(args, 2)
    bad_grace = deployment("late", namespace="team-12", grace="abc")  # type: ignore[arg-type]
    files[-1].write_text(files[-1].read_text() + "---\n" + to_yaml(bad_grace))
    files[3].write_text(files[3].read_text() + "---\nkind: Deployment\nmetadata: {name: [\n")
    serial = run(args, Context())
    assert len(serial.errors) == 2
    assert not _checked_by_namespace(args, 2)
    for jobs in (2, 3):
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)


@pytest.mark.usefixtures("small_is_large")
@pytest.mark.parametrize("parent_share", [1e9, 0.0])
def test_bad_files_among_good_ones_are_named_and_the_rest_checked(
        tmp_path: Path, parent_share: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "PARENT_SHARE", parent_share)
    files = _write(tmp_path / "fleet", _fleet(40))
    # A YAML error after a good document, a bad grace (a workload's field) late, a bad HPA
    # field early: errors come by file, then field errors by kind, as in the serial run.
    files[2].write_text(files[2].read_text() + "---\nkind: Deployment\nmetadata: {name: [\n")
    bad_hpa = hpa("app-1", namespace="team-0")
    bad_hpa["spec"]["minReplicas"] = "two"
    files[1].write_text(files[1].read_text() + "---\n" + to_yaml(bad_hpa))
    bad_grace = deployment("late", namespace="team-12", grace="abc")  # type: ignore[arg-type]
    files[-1].write_text(files[-1].read_text() + "---\n" + to_yaml(bad_grace))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    messages = [str(e) for e in serial.errors]
    assert len(messages) == 3
    assert messages[0].startswith(f"{files[2]}:") and "invalid YAML" in messages[0]
    assert "terminationGracePeriodSeconds" in messages[1] and "minReplicas" in messages[2]
    assert {f.file for f in serial.findings} >= {str(f) for f in files[3:]}
    for jobs in (2, 4):
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)
    _blind(monkeypatch)
    for jobs in (2, 4):
        assert _all_of(run(args, Context(), jobs=jobs)) == _all_of(serial)


@pytest.mark.usefixtures("small_is_large")
def test_a_file_cut_between_two_workers_is_read_as_one(tmp_path: Path) -> None:
    """A fleet's copies run from one file into the next: a share may end inside a file,
    between two namespaces, each worker reading its own documents of it (the others blanked,
    every line and document index kept). The serial run's findings, lines and counts; and
    a YAML error in such a file (which ends its reading there) leaves the input to one
    process."""
    files = _write(tmp_path / "fleet", _fleet(60))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    cut = _shares(args, 2)
    assert cut is not None and _cut_inside(args, 2)
    (piece,) = _names(cut[0]) & _names(cut[1])
    assert isinstance(parallel._in_workers(args, Context(), 2), Result)
    assert _all_of(run(args, Context(), jobs=2)) == _all_of(serial)
    rendered = run(args, Context(), jobs=2, renderer=report.json_lines).rendered
    assert _lines(rendered) == list(report.json_lines(serial.findings))
    # The error after the cut, in the second worker's piece: its documents after the error
    # are not read, whoever reads them.
    broken = next(f for f in files if str(f) == piece)
    broken.write_text(broken.read_text() + "---\nkind: Deployment\nmetadata: {name: [\n")
    serial = run(args, Context())
    assert [e.file for e in serial.errors] == [piece]
    cut = _shares(args, 2)
    assert cut is not None and _names(cut[0]) & _names(cut[1]) == {piece}
    assert parallel._in_workers(args, Context(), 2) is None
    assert _all_of(run(args, Context(), jobs=2)) == _all_of(serial)


@pytest.mark.usefixtures("small_is_large")
@pytest.mark.parametrize("parent_share", [1e9, 0.0], ids=["parent-checks-straddling",
                                                           "workers-read-everything"])
def test_a_namespace_beyond_the_window_straddles_and_is_still_exact(
        tmp_path: Path, parent_share: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent guesses namespaces only in the WINDOW files each side of a cut: one in the
    first and last files only is not seen, the cut straddles it, and the workers' summaries
    say so (the parent checks it, or every worker reads every file)."""
    monkeypatch.setattr(parallel, "PARENT_SHARE", parent_share)
    files = _write(tmp_path / "fleet", _fleet(120))
    assert len(files) > 4 * parallel.WINDOW
    far = [deployment("far", namespace="far", replicas=1),
           pdb("far", namespace="far", min_available=1)]  # protects the Deployment
    files[0].write_text(files[0].read_text() + "---\n" + to_yaml(far[0]))
    files[-1].write_text(files[-1].read_text() + "---\n" + to_yaml(far[1]))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())
    # Read apart, the PDB would select nothing and the Deployment have no PDB.
    far_rules = {f.rule for f in serial.findings if f.object.namespace == "far"}
    assert far_rules and not far_rules & {"pdb-selects-nothing", "pdb-missing"}
    cut = _shares(args, 2)
    assert cut is not None
    assert _all_of(run(args, Context(), jobs=2)) == _all_of(serial)
    rendered = run(args, Context(), jobs=2, renderer=report.json_lines).rendered
    assert _lines(rendered) == list(report.json_lines(serial.findings))


@pytest.mark.usefixtures("small_is_large")
def test_a_failed_worker_leaves_it_to_the_serial_run(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "fleet", _fleet(20))
    args = [str(tmp_path / "fleet")]
    serial = run(args, Context())

    def broken(*_: object) -> None:
        raise RuntimeError("a worker's bug")

    monkeypatch.setattr(parallel, "build_index", broken)  # only the workers build with it
    # Every file of this fleet shares a namespace with the next: the workers start only when
    # one file is cut in two (this test once passed without any worker).
    assert _cut_inside(args, 2)
    result = run(args, Context(), jobs=2)
    assert _all_of(result) == _all_of(serial)
    assert serial.worker_failure is None and result.worker_failure is not None
    assert result.worker_failure.cause == "RuntimeError: a worker's bug"
    assert result.worker_failure.failed == result.worker_failure.workers == 2


def test_small_inputs_and_stdin_stay_in_one_process(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    files = [str(p) for p in _write(tmp_path / "fleet", _fleet(20))]
    started: list[object] = []
    monkeypatch.setattr(parallel._Worker, "start", lambda *a: started.append(a))
    assert parallel._in_workers(files, Context(), 2) is None  # under MIN_BYTES
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    assert parallel._in_workers([*files, "-"], Context(), 2) is None
    assert parallel._in_workers(files[:1], Context(), 2) is None
    assert parallel._in_workers(files, Context(), 1) is None
    assert not started


def test_shares_hold_namespaces_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 1)
    texts = ["metadata: {name: a, namespace: one}\nkind: Service\n",
             "kind: Service\nmetadata:\n  namespace: one\n",
             '{"kind": "Service", "metadata": {"namespace": "two"}}',
             "kind: Service\nmetadata:\n  namespace: 'three'\n",
             "kind: Service\nmetadata:\n  name: x\n"]  # the default namespace
    sources = [SourceText(f"{n}.yaml", t) for n, t in enumerate(texts)]

    def cuts(sources: list[SourceText], jobs: int) -> list[int] | None:
        """Where each share after the first starts (these files are one document each)."""
        by_name = {s.name: s for s in sources}
        cut = parallel.shares(parallel._Input(list(by_name), [len(s.text) for s in sources],
                                              read=by_name.__getitem__), jobs)
        if cut is None:
            return None
        assert [s if isinstance(s, str) else s.name for share in cut for s in share] == list(
            by_name)
        return list(accumulate(len(share) for share in cut[:-1]))

    for jobs in (2, 4, 8):
        at = cuts(sources, jobs)
        assert at is not None and 1 <= len(at) < jobs and at == sorted(set(at))
        assert set(at) <= {2, 3, 4}  # never between the two files of `one`
    assert cuts(sources, 8) == [2, 3, 4]
    # Two files of the default namespace are not cut apart either.
    assert cuts([*sources, SourceText("d.yaml", texts[4])], 8) == [2, 3, 4]
    assert cuts(sources[:2], 2) is None


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fleet at the real threshold, in files that can be cut: enough for two workers."""
    directory = tmp_path_factory.mktemp("large") / "fleet"
    files = _write(directory, _fleet(1200), per_file=100)
    assert sum(f.stat().st_size for f in files) >= parallel.MIN_BYTES
    return directory


def _command(fleet: Path, jobs: str, output: str, points: Path | None = None,
             action: Action = "print") -> tuple[int, str, str, int | None]:
    """The real command's exit code, stdout and stderr; with `points`, the pid of the
    process that reached check.worker.checked armed with `action` (None: none did)."""
    env = dict(os.environ)
    env.pop(ENV, None)
    hit = None
    if points is not None:
        points.mkdir(exist_ok=True)
        (points / "check.worker.checked").write_text(action)
        hit = points / "check.worker.checked.hit"
        hit.unlink(missing_ok=True)
        env[ENV] = str(points)
    proc = subprocess.Popen(
        [sys.executable, "-m", "drainsafe", "check", "--no-config", "--jobs", jobs,
         "-o", output, str(fleet)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=fleet.parent)
    out, err = proc.communicate()
    pid = int(hit.read_text()) if hit is not None and hit.exists() else None
    assert pid != proc.pid, "the point is in the workers' code only"
    return proc.returncode, out, err, pid


def test_the_command_with_workers_writes_the_serial_bytes(large: Path, tmp_path: Path) -> None:
    # The workers ran (one of them reached the point, armed only to record it) and nothing
    # fell back to one process: their output is the serial run's, byte for byte.
    for output in ("json", "sarif", "text"):
        code, _, err, _ = serial = _command(large, "1", output, tmp_path / "points")
        assert code == 1 and serial[3] is None, err
        workers = _command(large, "2", output, tmp_path / "points")
        assert workers[3] is not None, "no worker ran"
        assert workers[:3] == serial[:3]


def test_a_failed_worker_is_said_and_its_share_still_checked(large: Path,
                                                             tmp_path: Path) -> None:
    serial = _command(large, "1", "json")
    code, out, err, pid = _command(large, "2", "json", tmp_path / "points", "panic")
    assert pid is not None
    assert (code, out) == serial[:2]  # the findings complete: one process checked them all
    said = err.removeprefix(serial[2]).splitlines()
    assert err.startswith(serial[2]) and len(said) == 1, err
    assert re.fullmatch(
        rf"drainsafe check: worker [12] of 2 \(files {large}/part-\d+\.yaml to "
        rf"{large}/part-\d+\.yaml\) failed: FailpointPanic: failpoint check\.worker\.checked; "
        r"the input was checked in one process instead", said[0]), said[0]


_SUBREAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
command = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
os.waitpid(command.pid, 0)
try:  # a worker the command left behind is ours now (its reaper), alive or a zombie
    print(os.waitpid(-1, 0)[0])
except ChildProcessError:
    print("none")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER")
def test_the_command_ends_after_its_workers(large: Path, tmp_path: Path) -> None:
    # Its caller's wait (a shell's `time`, a bench's rusage) then counts the workers' CPU,
    # and none of them is left to init. The failpoint proves a worker ran.
    points = tmp_path / "points"
    points.mkdir()
    (points / "check.worker.checked").write_text("print")
    env = {k: v for k, v in os.environ.items() if k != ENV} | {ENV: str(points)}
    left = subprocess.run(
        [sys.executable, "-c", _SUBREAPER, sys.executable, "-m", "drainsafe", "check",
         "--no-config", "--jobs", "2", "-o", "json", str(large)],
        capture_output=True, text=True, env=env, check=True)
    assert (points / "check.worker.checked.hit").exists(), "no worker ran"
    assert left.stdout.strip() == "none", left


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_jobs_must_be_one_or_more(value: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "drainsafe", "check", "--jobs", value, "-"],
                          capture_output=True, text=True, input="", check=False)
    assert proc.returncode == 2
    assert "--jobs" in proc.stderr and "1 or more" in proc.stderr


@pytest.mark.parametrize(("load", "jobs"), [(0.0, 4), (0.4, 4), (1.6, 2), (3.6, 1), (9.0, 1)])
def test_default_jobs_are_the_idle_cpus(monkeypatch: pytest.MonkeyPatch, load: float,
                                        jobs: int) -> None:
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 4)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert parallel.default_jobs() == jobs


def test_lines_of_one_document_from_two_processes_are_refused() -> None:
    """Lines cannot be sorted among other lines: a document's lines must be one process's
    (the run then falls back to one process, said as a worker failure)."""
    def part(*files: str) -> parallel._Part:
        return parallel._Part(([], [], [], []), [(f, 0, [f"{f}-line"]) for f in files], {2: 1},
                              [], ([], [], []), 1, 1, 1, set())

    assert not isinstance(parallel._joined([part("a"), part("b")], [], report.json_lines, {}),
                          int)
    assert parallel._joined([part("a"), part("b", "c"), part("c")], [], report.json_lines,
                            {}) == 2
    joined = parallel._joined([part("b"), part("a")], [], report.json_lines, {})
    assert not isinstance(joined, int)
    assert joined.blocks == [["a-line", "b-line"]]  # file by file, as the serial sort
    assert joined.severities[Severity.WARNING] == 2


def test_a_workers_stored_lines_are_joined_as_spans_of_its_text() -> None:
    """A forked worker's lines come as its text (bytes); documents next to each other in it
    are written as one span, and the parent's own lines between them as lines."""
    here = parallel._Part(([], [], [], []), [("b", 0, ["b-line"])], {2: 1}, [],
                          ([], [], []), 1, 1, 1, set())
    text = ",".join(["a-0", "a-1", "c-0"]).encode()
    forked = parallel._Part(([], [], [], []), [], {2: 3}, [], ([], [], []), 1, 1, 1, set(),
                            stored=[("a", 0, 3), ("a", 1, 3), ("c", 0, 3)],
                            text=memoryview(text))
    joined = parallel._joined([here, forked], [], report.json_lines, {}, ",")
    assert not isinstance(joined, int)
    assert [b if isinstance(b, list) else bytes(b) for b in joined.blocks] == [
        b"a-0,a-1", ["b-line"], b"c-0"]
    assert _lines(joined) == ["a-0", "a-1", "b-line", "c-0"]
    assert parallel._joined([forked, forked], [], report.json_lines, {}, ",") == 1


def test_a_rule_asking_the_whole_input_before_it_is_told_fails_loudly() -> None:
    """A worker runs the rules that ask the whole input's facts only once told them
    (Rule.whole_input); a rule that asks without saying so fails (and the run falls back
    to one process), where it would count only its worker's share."""
    index = Index(whole=UNTOLD)
    with pytest.raises(RuntimeError, match="whole_input=True"):
        index.workload_count()
    with pytest.raises(RuntimeError, match="whole_input=True"):
        index.has_standalone_workload()
    assert [r.id for r in all_rules().values() if r.whole_input] == ["pdb-selects-nothing"]
