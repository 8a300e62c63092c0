"""`drainsafe serve` and `drainsafe run`: drain-aware serving from the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from drainsafe.server import config
from drainsafe.shell import (
    EXIT_FAILED,
    EXIT_FORCED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    SIGNAL_EXIT_BASE,
    exit_codes_text,
)

_LIFECYCLE_EXITS = (
    (EXIT_OK, "everything finished"),
    (EXIT_FAILED, "something was ended at the deadline"),
    (EXIT_FORCED, "forced by a second signal while work was in flight"),
)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be >= 0 and finite")
    return value


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return (host.strip("[]") or "0.0.0.0", int(port))


def port_number(text: str) -> int:
    try:
        return config.port_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _lifecycle_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drain-delay", type=seconds, default=config.DEFAULT_DRAIN_DELAY, metavar="S",
                   help="keep accepting after SIGTERM this long, answering readiness 503 and "
                   "Connection: close (cover endpoint propagation) [%(default)s]")
    p.add_argument("--shutdown-timeout", type=seconds, default=config.DEFAULT_SHUTDOWN_TIMEOUT,
                   metavar="S", help="after the drain delay, in-flight work gets this long; "
                   "streams still open then end with the drain error event [%(default)s]")
    p.add_argument("--idle-grace", type=seconds, default=config.DEFAULT_IDLE_GRACE, metavar="S",
                   help="close an idle keep-alive connection once idle this long after the "
                   "listener closed [%(default)s]")
    p.add_argument("--admin-host", default=config.DEFAULT_ADMIN_HOST,
                   help="the admin port's bind address: readiness, liveness, the drain "
                   "trigger and metrics are served there only, never on the application's "
                   "port; every interface by default, as the kubelet probes the pod IP "
                   "[%(default)s]")
    p.add_argument("--admin-port", type=port_number, default=config.DEFAULT_ADMIN_PORT,
                   help="the admin port (name it drainsafe-admin in the pod spec; list it "
                   "in no Service) [%(default)s]")
    p.add_argument("--admin-token-file", metavar="FILE", default=None,
                   help="the drain trigger then needs this file's token in header "
                   "X-Drainsafe-Token (preStop httpGet: httpHeaders); others get 403")
    p.add_argument("--header-timeout", type=seconds, default=config.DEFAULT_HEADER_TIMEOUT,
                   metavar="S",
                   help="drainsafe's own listeners (run's proxy, the admin port) close a "
                   "connection whose request head is not complete after this long "
                   "[%(default)s]")
    p.add_argument("--keep-alive-timeout", type=seconds,
                   default=config.DEFAULT_KEEP_ALIVE_TIMEOUT, metavar="S",
                   help="close a keep-alive connection idle this long (serve: uvicorn's "
                   "--timeout-keep-alive, the same default) [%(default)s]")
    p.add_argument("--ready-path", default=config.DEFAULT_READY_PATH,
                   help="readiness endpoint on the admin port [%(default)s]")
    p.add_argument("--live-path", default=config.DEFAULT_LIVE_PATH,
                   help="liveness endpoint on the admin port [%(default)s]")
    p.add_argument("--drain-path", default=config.DEFAULT_DRAIN_PATH,
                   help="drain trigger on the admin port, for a preStop httpGet "
                   "[%(default)s]")
    p.add_argument("--metrics-path", default=config.DEFAULT_METRICS_PATH,
                   help="Prometheus metrics on the admin port [%(default)s]")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve", help="run an ASGI app on uvicorn with a drain-aware shutdown",
        description="Run MODULE:APP on uvicorn. On SIGTERM (or a drain request) readiness "
        "fails at once while the server keeps accepting for the drain delay with "
        "Connection: close on every response; then the listener closes and in-flight work "
        "runs to the shutdown deadline; streams still open are ended with an explicit "
        f"error event. {exit_codes_text(*_LIFECYCLE_EXITS)} DRAINSAFE_GRACE_SECONDS (the "
        "pod's terminationGracePeriodSeconds) is checked against the settings at start-up.")
    serve.add_argument("app", metavar="MODULE:APP", help="the ASGI app to import")
    serve.add_argument("--host", default="127.0.0.1",
                       help="bind address (use 0.0.0.0 in a pod) [%(default)s]")
    serve.add_argument("--port", type=int, default=8000, help="[%(default)s]")
    serve.add_argument("--factory", action="store_true",
                       help="MODULE:APP is a function returning the app")
    serve.add_argument("--no-access-log", action="store_true")
    _lifecycle_options(serve)
    serve.set_defaults(handler=_serve)

    run = subparsers.add_parser(
        "run", help="run a server as a child, with a drain-aware proxy or signal gate",
        description="Run CMD as a child process with PID 1 duties (signal forwarding, "
        "zombie reaping, exit code). proxy mode: an HTTP/1.1 proxy on --listen in front of "
        "the child on --upstream tracks every request and stream, drains like "
        "`drainsafe serve`, and gives the child SIGTERM once nothing is in flight. signal "
        "mode: no data path (the child serves the pod's port; no --listen); SIGTERM held "
        "for the drain delay, then until the child's own in-flight metric is zero. In both "
        "modes readiness, liveness, the drain trigger and metrics are on the admin port "
        "(--admin-port), never on the serving port. "
        + exit_codes_text(*_LIFECYCLE_EXITS) + " Otherwise the child's own code "
        f"({EXIT_NOT_FOUND}: CMD cannot be started; {SIGNAL_EXIT_BASE}+N: the child died "
        "from signal N that drainsafe did not send).")
    run.add_argument("--mode", choices=["proxy", "signal"], default="proxy")
    run.add_argument("--listen", type=host_port, default=None,
                     metavar="HOST:PORT", help="proxy mode: the pod's serving port (use "
                     "0.0.0.0:PORT in a pod) [127.0.0.1:8080]; not in signal mode")
    run.add_argument("--upstream", type=host_port, default=("127.0.0.1", 8000),
                     metavar="HOST:PORT", help="where the child listens [127.0.0.1:8000]")
    run.add_argument("--preset", choices=["vllm", "tgi", "triton", "sglang"],
                     help="known server: its ready endpoint, in-flight metric, shutdown flag")
    run.add_argument("--child-ready-path", default=None,
                     help="the child's own readiness endpoint, consulted by ours")
    run.add_argument("--child-metrics-path", default=None,
                     help="signal mode: the child's Prometheus endpoint [/metrics]")
    run.add_argument("--in-flight-metric", action="append", default=None, metavar="NAME",
                     help="signal mode: metric(s) whose sum is the child's in-flight work")
    run.add_argument("--child-exit-timeout", type=seconds, default=None, metavar="S",
                     help="after SIGTERM, wait this long for the child before SIGKILL "
                     "[budget buffer, 5]")
    _lifecycle_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    run.set_defaults(handler=_run)


def _settings(args: argparse.Namespace) -> config.Settings:
    return config.Settings(drain_delay=args.drain_delay,
                           shutdown_timeout=args.shutdown_timeout, idle_grace=args.idle_grace)


def _paths(args: argparse.Namespace) -> config.Paths:
    return config.Paths(ready=args.ready_path, live=args.live_path, drain=args.drain_path,
                        metrics=args.metrics_path)


def _admin(args: argparse.Namespace) -> config.AdminSettings:
    """The admin port's settings; ValueError when the token file is unusable."""
    token = None if args.admin_token_file is None else config.read_token(args.admin_token_file)
    limits = config.Limits(header_timeout=args.header_timeout,
                           keep_alive_timeout=args.keep_alive_timeout)
    return config.AdminSettings(host=args.admin_host, port=args.admin_port, token=token,
                                limits=limits)


def _start_up(args: argparse.Namespace) -> config.Settings:
    """Logging, settings and the grace-period check common to both commands."""
    import logging
    import os

    from drainsafe.server.lifecycle import budget_warning

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(message)s")
    # httpx logs every request at INFO; readiness and metrics polls are not news.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = _settings(args)
    grace = config.parse_grace(os.environ.get(config.ENV_GRACE))
    warning = budget_warning(settings, grace)
    if warning:
        logging.getLogger("drainsafe.server").warning("drainsafe: %s", warning)
    return settings


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = _start_up(args)
        admin = _admin(args)
    except ValueError as exc:
        print(f"drainsafe serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.admin_port == args.port != 0:
        print(f"drainsafe serve: --port and --admin-port are both {args.port}", file=sys.stderr)
        return EXIT_USAGE
    from uvicorn.importer import ImportFromStringError, import_from_string

    from drainsafe.server import serve
    from drainsafe.server.runtime import DrainRuntime

    sys.path.insert(0, ".")
    try:
        app = import_from_string(args.app)
        if args.factory:
            app = app()
    except ImportFromStringError as exc:
        print(f"drainsafe serve: cannot import {args.app}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    runtime = DrainRuntime(settings, paths=_paths(args))
    server = serve.build(app, runtime, admin, host=args.host, port=args.port,
                         timeout_keep_alive=args.keep_alive_timeout,
                         log_level=args.log_level, access_log=not args.no_access_log,
                         lifespan="auto")
    return serve.run(server)


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("drainsafe run: give the command after --, e.g. "
              "drainsafe run -- uvicorn app:app --port 8000", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = _start_up(args)
        admin = _admin(args)
    except ValueError as exc:
        print(f"drainsafe run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from drainsafe.server import supervisor

    try:
        options = supervisor.RunOptions.from_args(args, command, settings, _paths(args), admin)
    except ValueError as exc:
        print(f"drainsafe run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return supervisor.main(options)
