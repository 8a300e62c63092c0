"""The pure drain lifecycle and runtime bookkeeping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.server import lifecycle
from drainsafe.server.config import Paths, Settings, parse_grace
from drainsafe.server.lifecycle import (
    EXIT_CUT,
    Phase,
    State,
    advance,
    begin_drain,
    budget_warning,
    idle_grace_over,
    on_signal,
)
from drainsafe.server.runtime import DrainRuntime, Tracked
from drainsafe.shell import EXIT_API, EXIT_FORCED, EXIT_OK

S = Settings(drain_delay=5, shutdown_timeout=20, idle_grace=0.5, flush=1)


def test_first_signal_drains_second_forces() -> None:
    state = on_signal(State(), 100.0, "SIGTERM")
    assert state.phase is Phase.DRAINING and state.drain_started == 100.0
    assert not state.forced
    state = on_signal(state, 101.0, "SIGINT")
    assert state.forced
    assert advance(state, 101.0, S, in_flight=3).phase is Phase.EXIT


def test_drain_request_then_kubelet_sigterm_is_not_a_forced_exit() -> None:
    state = begin_drain(State(), 10.0, "drain endpoint")
    state = on_signal(state, 15.0, "SIGTERM")
    assert not state.forced and state.drain_started == 10.0


def test_phases_follow_the_clock() -> None:
    state = on_signal(State(), 0.0, "SIGTERM")
    assert advance(state, 4.9, S, in_flight=2).phase is Phase.DRAINING
    closing = advance(state, 5.0, S, in_flight=2)
    assert closing.phase is Phase.CLOSING and closing.deadline(S) == 25.0
    # Idle right after closing: late requests on idle connections still get idle_grace.
    assert advance(closing, 5.1, S, in_flight=0).phase is Phase.CLOSING
    assert advance(closing, 5.5, S, in_flight=0).phase is Phase.EXIT
    # Work still running at the deadline: cut once, then exit after the flush.
    cut = advance(closing, 25.0, S, in_flight=1)
    assert cut.cut_done and cut.phase is Phase.CLOSING
    assert lifecycle.should_cut(cut, 25.0, S)
    assert advance(cut, 26.0, S, in_flight=1).phase is Phase.EXIT


def test_idle_grace_counts_from_when_each_connection_went_idle() -> None:
    closing = advance(on_signal(State(), 0.0, "SIGTERM"), 5.0, S, in_flight=1)
    assert closing.phase is Phase.CLOSING
    # Idle before CLOSING: the grace counts from the start of CLOSING, not before.
    assert not idle_grace_over(closing, 5.4, S, idle_since=1.0)
    assert idle_grace_over(closing, 5.5, S, idle_since=1.0)
    # A stream that ended at 6.0, past the grace counted from CLOSING: its connection
    # keeps its own grace, and the process does not exit under it.
    assert not idle_grace_over(closing, 6.4, S, idle_since=6.0)
    assert advance(closing, 6.4, S, in_flight=0, newest_idle=6.0).phase is Phase.CLOSING
    assert idle_grace_over(closing, 6.5, S, idle_since=6.0)
    assert advance(closing, 6.5, S, in_flight=0, newest_idle=6.0).phase is Phase.EXIT


def test_exit_codes() -> None:
    assert lifecycle.exit_code(State(), cut=0, in_flight=0) == EXIT_OK
    assert lifecycle.exit_code(State(), cut=1, in_flight=0) == EXIT_CUT
    forced = State(forced=True)
    assert lifecycle.exit_code(forced, cut=0, in_flight=0) == EXIT_OK
    assert lifecycle.exit_code(forced, cut=2, in_flight=0) == EXIT_FORCED == 5
    assert EXIT_FORCED != EXIT_API  # 3 means the API server in every command


@given(st.lists(st.tuples(st.sampled_from(["signal", "drain", "tick"]),
                          st.floats(min_value=0, max_value=5, allow_nan=False),
                          st.integers(min_value=0, max_value=3)), max_size=30))
def test_phases_never_go_back(events: list[tuple[str, float, int]]) -> None:
    order = list(Phase)
    state, now = State(), 0.0
    for kind, dt, in_flight in events:
        now += dt
        before = state
        if kind == "signal":
            state = on_signal(state, now, "SIGTERM")
        elif kind == "drain":
            state = begin_drain(state, now, "endpoint")
        else:
            state = advance(state, now, S, in_flight=in_flight)
        assert order.index(state.phase) >= order.index(before.phase)
        if state.phase is not Phase.SERVING:
            assert state.drain_started is not None


def test_budget_warning_uses_the_shared_budget() -> None:
    assert budget_warning(Settings(drain_delay=5, shutdown_timeout=20), None) is None
    warning = budget_warning(Settings(drain_delay=10, shutdown_timeout=90), 60)
    assert warning is not None and "10s + 90s + 5s = 105s > 60s" in warning
    assert "DRAINSAFE_GRACE_SECONDS" in warning


def test_settings_and_grace_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="drain-delay must be >= 0"):
        Settings(drain_delay=-1)
    with pytest.raises(ValueError, match="shutdown-timeout"):
        Settings(shutdown_timeout=float("nan"))
    assert parse_grace(None) is None and parse_grace("45") == 45.0
    with pytest.raises(ValueError, match="DRAINSAFE_GRACE_SECONDS='x'"):
        parse_grace("x")


class _Fake(Tracked):
    __slots__ = ()


def test_runtime_counts_requests_after_drain_and_cuts_at_deadline() -> None:
    clock = [0.0]
    rt = DrainRuntime(Settings(drain_delay=1, shutdown_timeout=2, idle_grace=0.1),
                      clock=lambda: clock[0])
    early = _Fake()
    rt.track(early)
    rt.signal("SIGTERM")
    assert rt.phase is Phase.DRAINING and not rt.serving
    clock[0] = 0.4
    late = _Fake()
    rt.track(late)
    assert rt.received_after_drain == 1 and rt.last_after_drain == pytest.approx(0.4)
    rt.finish(late)
    clock[0] = 1.0
    rt.tick()
    assert rt.phase is Phase.CLOSING
    clock[0] = 3.0
    rt.tick()
    assert early.was_cut and rt.cut_count == 1
    assert rt.exit_code() == EXIT_CUT
    text = rt.registry()
    from prometheus_client import generate_latest

    metrics = generate_latest(text).decode()
    assert "drainsafe_streams_cut_total 1.0" in metrics
    assert "drainsafe_requests_after_drain_total 1.0" in metrics


def test_presets_feed_signal_mode_options() -> None:
    from drainsafe.cli import build_parser
    from drainsafe.server.supervisor import RunOptions

    args = build_parser().parse_args(
        ["run", "--mode", "signal", "--preset", "triton", "--upstream", "127.0.0.1:8000",
         "--", "tritonserver", "--exit-timeout-secs", "90"])
    opts = RunOptions.from_args(args, args.command[1:], Settings(), Paths())
    assert opts.child_ready_path == "/v2/health/ready"
    assert opts.child_metrics_url == "http://127.0.0.1:8002/metrics"
    assert opts.in_flight_metrics == ("nv_inference_pending_request_count",)
    vllm = build_parser().parse_args(["run", "--preset", "vllm", "--", "vllm", "serve"])
    opts = RunOptions.from_args(vllm, ["vllm", "serve"], Settings(), Paths())
    assert "vllm:num_requests_running" in opts.in_flight_metrics
    bare = build_parser().parse_args(["run", "--mode", "signal", "--", "server"])
    with pytest.raises(ValueError, match="--in-flight-metric"):
        RunOptions.from_args(bare, ["server"], Settings(), Paths())


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    from drainsafe import cli

    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_run_help_says_where_signal_mode_serves_readiness(
        capsys: pytest.CaptureFixture[str]) -> None:
    from drainsafe.cli import build_parser
    from drainsafe.server.supervisor import RunOptions

    text = _help("run", capsys)
    # --listen is refused in signal mode, so the help must not send readiness there.
    assert "readiness on --listen" not in text
    assert "no --listen" in text
    assert "readiness, liveness, the drain trigger and metrics are on the admin port" in text
    args = build_parser().parse_args(
        ["run", "--mode", "signal", "--preset", "vllm", "--listen", "0.0.0.0:8080", "--",
         "vllm", "serve"])
    with pytest.raises(ValueError, match="drop --listen"):
        RunOptions.from_args(args, ["vllm", "serve"], Settings(), Paths())


@pytest.mark.parametrize("command", ["serve", "run"])
def test_serve_and_run_help_give_forced_exit_its_own_code(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(command, capsys)
    assert f"{EXIT_FORCED} forced by a second signal" in text
    assert f"{EXIT_API} forced" not in text and f"{EXIT_API}: forced" not in text
