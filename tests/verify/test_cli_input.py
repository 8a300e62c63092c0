"""verify's input checked before the load (issue 18): URL, --out, the API server with -n."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from drainsafe.cli import main


@pytest.mark.parametrize(("url", "words"), [
    ("http://", "has no host"),            # before: ~4,000 "error" requests, exit 1
    ("http:///path", "has no host"),
    ("https://:8000/", "has no host"),
    ("http://127.0.0.1:99999/", "out of range"),
    ("http://127.0.0.1:0/", "port 0"),
])
def test_url_without_host_or_with_a_bad_port_is_a_usage_error(
        url: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert main(["verify", url, "--duration", "5", "--no-progress"]) == 2
    assert time.monotonic() - started < 5  # no load was run: it would have taken its 5 s
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "words"), [
    (["--concurrency", "100000000"], "--concurrency 1e+08: above the limit of 10,000"),
    (["--duration", "1e12"], "--duration 1e+12: above the limit of 604,800"),
    (["--rate", "1e9"], "--rate 1e+09: above the limit of 100,000"),
])
def test_flags_above_their_limits_are_usage_errors(
        flags: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "http://127.0.0.1:1/", "--no-progress", *flags]) == 2
    assert words in capsys.readouterr().err


def test_out_that_is_a_file_is_refused_before_the_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "record"
    taken.write_text("keep me")
    started = time.monotonic()
    # The URL is unreachable on purpose: had the load run, it would take its 5 s.
    assert main(["verify", "http://127.0.0.1:1/", "--duration", "5", "--no-progress",
                 "--out", str(taken)]) == 2
    assert time.monotonic() - started < 5  # the load would have taken its 5 s
    assert f"--out {taken}: exists and is not a directory" in capsys.readouterr().err
    assert taken.read_text() == "keep me"


def test_out_that_cannot_be_written_is_refused_before_the_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "file"
    parent.write_text("")
    assert main(["verify", "http://127.0.0.1:1/", "--duration", "5", "--no-progress",
                 "--out", str(parent / "sub")]) == 2
    assert "cannot write there" in capsys.readouterr().err


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    return str(path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A port that takes connections and never answers (an API server behind a dead LB)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s


def _port(s: socket.socket) -> int:
    return int(s.getsockname()[1])


def test_unreachable_api_server_fails_fast_with_exit_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    started = time.monotonic()
    code = main(["verify", "http://127.0.0.1:1/", "--duration", "5", "--no-progress",
                 "-n", "default", "-l", "app=x", "--kubeconfig", kc])
    assert code == 3
    assert time.monotonic() - started < 5  # before: 30 s of silence
    err = capsys.readouterr().err
    assert "cannot list pods in namespace 'default' at http://127.0.0.1:" in err


def test_silent_api_server_times_out_in_seconds(
        tmp_path: Path, silent_server: socket.socket,
        capsys: pytest.CaptureFixture[str]) -> None:
    kc = _kubeconfig(tmp_path, f"http://127.0.0.1:{_port(silent_server)}")
    started = time.monotonic()
    assert main(["verify", "http://127.0.0.1:1/", "--duration", "5", "--no-progress",
                 "-n", "default", "--kubeconfig", kc]) == 3
    assert time.monotonic() - started < 15
    assert "cannot list pods" in capsys.readouterr().err


def test_ctrl_c_while_waiting_for_the_api_server_stops_at_once(
        tmp_path: Path, silent_server: socket.socket) -> None:
    kc = _kubeconfig(tmp_path, f"http://127.0.0.1:{_port(silent_server)}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "drainsafe", "verify", "http://127.0.0.1:1/", "--duration", "5",
         "--no-progress", "-n", "default", "--kubeconfig", kc],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        silent_server.settimeout(30)
        connection, _ = silent_server.accept()  # verify is now waiting for an answer
        with connection:  # held open (unanswered) until verify has exited
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 2.5
    assert "interrupted" in err and "Traceback" not in err


def test_sigterm_stops_the_load_and_keeps_the_record(tmp_path: Path) -> None:
    """A cancelled CI job or a deleted Job sends SIGTERM: verify stops sending, lets what is
    in flight finish and writes its record, as for Ctrl-C."""
    target = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = tmp_path / "out"
    answered = threading.Event()

    def read_log() -> None:
        # http.server logs each request on stderr; read it all, or a full pipe stalls it.
        assert target.stderr is not None
        for line in target.stderr:
            if '" 200 ' in line:
                answered.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        assert target.stdout is not None
        port = int(target.stdout.readline().split(" port ")[1].split()[0])
        proc = subprocess.Popen(
            [sys.executable, "-m", "drainsafe", "verify", f"http://127.0.0.1:{port}/",
             "--duration", "300", "--no-progress", "--out", str(out), "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert answered.wait(60), "no request answered"  # some sent and answered
            proc.send_signal(signal.SIGTERM)
            stdout, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    finally:
        target.kill()
        target.wait()
    assert proc.returncode == 0, err
    record = yaml.safe_load((out / "record.json").read_text())
    summary = record["summary"]
    assert summary["total"] > 0 and summary["failed"] == 0, summary
    assert record["elapsed"] < 60, record["elapsed"]  # stopped early, not at --duration
    assert yaml.safe_load(stdout)["total"] == summary["total"]


def test_api_server_lost_after_the_preflight_exits_3_not_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The API server answers the preflight's pod list, then is gone when the watches
    list: that is the API server (3), not a usage error (2, before issue 28)."""
    import http.server
    import json
    import threading

    from drainsafe.verify import session

    class OnePodList(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": "1"}, "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), OnePodList)
    answered = threading.Thread(target=lambda: (server.handle_request(), server.server_close()))
    answered.start()
    # The watches retry until their sync timeout; the test need not wait the full 30 s.
    monkeypatch.setattr(session, "WATCH_SYNC_SECONDS", 1.0)
    kc = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        code = main(["verify", "http://127.0.0.1:1/", "--duration", "5", "--no-progress",
                     "-n", "default", "--kubeconfig", kc])
    finally:
        answered.join(timeout=10)
    err = capsys.readouterr().err
    assert not answered.is_alive()  # the preflight was answered, then the server closed
    assert code == 3, err
    assert "watching pods failed: could not list /api/v1/namespaces/default/pods" in err


def test_watch_errors_map_to_the_exit_table_by_type() -> None:
    # A narrow unit test of the error mapping: each error verify expects from a watch.
    from drainsafe.kube.auth import ExecPluginError
    from drainsafe.kube.client import KubeconfigError
    from drainsafe.kube.errors import Forbidden, ServerError, TransportError
    from drainsafe.kube.watch import WaitTimeout
    from drainsafe.shell import EXIT_API, EXIT_USAGE
    from drainsafe.verify.cli import watch_failure_exit

    assert watch_failure_exit(KubeconfigError("kubeconfig x does not exist")) == EXIT_USAGE
    assert watch_failure_exit(ExecPluginError("plugin failed")) == EXIT_USAGE
    assert watch_failure_exit(TransportError(0, "ConnectError", "refused")) == EXIT_API
    assert watch_failure_exit(Forbidden(403, "Forbidden", "pods is forbidden")) == EXIT_API
    assert watch_failure_exit(ServerError(500, "InternalError", "etcd")) == EXIT_API
    assert watch_failure_exit(WaitTimeout("could not list /api/v1/pods")) == EXIT_API
    # Anything else is a bug, for the one internal-error path (exit 70), whatever it says.
    assert watch_failure_exit(RuntimeError("drainsafe.kube: no answer")) is None
    assert watch_failure_exit(TimeoutError("a plain timeout")) is None
