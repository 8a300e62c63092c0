"""`drainsafe verify` and `drainsafe tune`. Light imports only; the work happens in handlers."""

from __future__ import annotations

import argparse
from typing import Any

from drainsafe.shell import (
    EXIT_API,
    EXIT_FAILED,
    EXIT_NOT_BOUNDED,
    EXIT_OK,
    EXIT_USAGE,
    exit_codes_text,
)

LIMITS: dict[str, float] = {
    "duration": 7 * 86_400.0, "concurrency": 10_000, "rate": 100_000.0,
    "max_inflight": 100_000, "timeout": 86_400.0, "linger": 86_400.0,
}
"""Each flag's largest value: one worker per --concurrency and one task per request in flight
live in memory, and every request is kept for the record (docs/verify.md, Limits)."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""--body-file is read into memory once and sent with every request."""

PREFLIGHT_SECONDS = 5.0
"""How long verify waits for the API server before the load starts (-n/-l)."""


def register(subparsers: Any) -> None:
    _register_verify(subparsers)
    _register_tune(subparsers)


def _register_verify(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        help="send constant load (e.g. through a rollout or drain) and classify every request",
        description="Send constant load to URL over a keep-alive pool, classify every request "
        "(ok, http_5xx, refused, reset, closed, timeout, truncated stream, drain marker), "
        "optionally watch the pods behind it, and write a record and a timeline. "
        + exit_codes_text(
            (EXIT_OK, "every request ok"),
            (EXIT_FAILED, "a request failed (it can gate a rollout in CI)"),
            (EXIT_USAGE, "usage error (bad URL, flag, --out or kubeconfig, all checked "
             "before the load starts)"),
            (EXIT_API, f"with -n: the API server cannot be reached or refuses the pod list "
             f"(checked first, within {PREFLIGHT_SECONDS:g} s)")),
    )
    p.add_argument("url", help="target URL (http:// or https://)")
    p.add_argument("--duration", type=float, default=30.0, metavar="S",
                   help="seconds of load (default 30); requests in flight then finish")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", "-c", type=int, default=10, metavar="N",
                      help="closed loop: N workers, each sends when its last request ended "
                      "(default 10)")
    load.add_argument("--rate", "-r", type=float, metavar="R",
                      help="open loop: start R requests per second whatever the latency")
    p.add_argument("--max-inflight", type=int, default=1000, metavar="N",
                   help="open loop: cap on requests in flight (default 1000)")
    p.add_argument("--no-keepalive", action="store_true",
                   help="a new connection per request (many separate clients)")
    p.add_argument("--method", "-m", default="GET", help="HTTP method (default GET)")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", "-d", help="request body")
    body.add_argument("--body-file", "-D", metavar="FILE", help="request body from a file")
    p.add_argument("--header", "-H", action="append", default=[], metavar="K:V",
                   help="request header (repeatable)")
    p.add_argument("--stream-end", default="[DONE]", metavar="MARKER",
                   help="an SSE stream without this marker is truncated (default [DONE]; "
                   "'' to disable)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="per request, whole exchange (default 120)")
    p.add_argument("--pod-header", default="x-drainsafe-pod", metavar="NAME",
                   help="response header naming the serving pod (default x-drainsafe-pod)")
    p.add_argument("--namespace", "-n", help="watch pods and EndpointSlices in this namespace")
    p.add_argument("--selector", "-l", metavar="LABELS",
                   help="label selector of the pods behind the URL (with --namespace)")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--linger", type=float, default=0.0, metavar="S",
                   help="keep watching pods S seconds after the load ends")
    probe = p.add_argument_group(
        "probe (while watching pods)",
        "a small load of fresh connections, recorded apart from yours, from which tune "
        "bounds the propagation lag")
    probe.add_argument("--probe-rate", type=float, default=20.0, metavar="R",
                       help="fresh connections per second (default 20)")
    probe.add_argument("--probe-path", default="/", metavar="PATH",
                       help="GET this path on the URL's host (default /); any answer below "
                       "500 counts as answered")
    probe.add_argument("--no-probe", action="store_true", help="send no probe load")
    probe.add_argument("--metrics-port", metavar="PORT",
                       help="read terminating pods' drainsafe /metrics through the API "
                       "server's pod proxy on this port (number or port name) when they "
                       "declare no 'drainsafe-admin' port")
    p.add_argument("--out", metavar="DIR",
                   help="write record.json, timeline.png and timeline.html here")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="summary format on stdout")
    p.add_argument("--no-progress", action="store_true", help="no live progress on stderr")
    p.set_defaults(handler=run_verify)


def _register_tune(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "tune",
        help="recommend drain delay, shutdown deadline and grace period from measurements",
        description="Read verify's record and/or drainsafe serve/run metrics and recommend "
        "drain delay (propagation bound + margin), shutdown deadline (request duration p99 or "
        "declared maximum), terminationGracePeriodSeconds and readiness probe timing, "
        "stating the measurement behind each number. " + exit_codes_text(
            (EXIT_OK, "settings printed"), (EXIT_FAILED, "nothing measured"),
            (EXIT_USAGE, "usage or input error"),
            (EXIT_NOT_BOUNDED, "the record cannot bound the propagation lag (tune names the "
             "run that would)")),
    )
    p.add_argument("--from", dest="source", action="append", default=[], metavar="PATH",
                   help="verify --out directory or record.json, or a metrics dump or pod log "
                   "(repeatable; a directory is read whole)")
    p.add_argument("--metrics", action="append", default=[], metavar="FILE",
                   help="drainsafe serve/run figures of one pod: a /metrics text dump or its "
                   "log (kubectl logs) with the phase lines (repeatable)")
    p.add_argument("--workload", metavar="KIND/NAME", default="deployment/app",
                   help="workload to patch (default deployment/app)")
    p.add_argument("--container", metavar="NAME",
                   help="container for the probe settings (default: the workload's name)")
    p.add_argument("--namespace", "-n", help="namespace for the kubectl patch command")
    p.add_argument("--margin", type=float, default=0.2,
                   help="fraction added to each measured figure (default 0.2)")
    p.add_argument("--buffer", type=float, default=None, metavar="S",
                   help="seconds of slack in the grace period (default 5)")
    p.add_argument("--max-request", type=float, metavar="S",
                   help="declared longest request; overrides the measured p99")
    p.add_argument("--min-propagation", type=float, default=None, metavar="S",
                   help="declared floor for the propagation figure; also gives settings "
                   "when the record cannot bound the lag")
    p.add_argument("--confidence", type=float, default=0.99, metavar="C",
                   help="confidence of the propagation bound, per pod (default 0.99)")
    p.add_argument("--max-resolution", type=float, default=0.5, metavar="F",
                   help="largest resolution accepted, as a fraction of the propagation "
                   "bound (default 0.5; 0.5 s is always accepted); beyond it tune exits 4")
    p.add_argument("--drain-via", choices=("prestop", "server"), default="prestop",
                   help="hold traffic with a preStop sleep (default) or with drainsafe "
                   "serve/run's own --drain-delay")
    p.add_argument("-o", "--output", choices=("text", "yaml", "json", "patch"), default="text")
    p.set_defaults(handler=run_tune)


def run_verify(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import signal
    import sys
    from contextlib import nullcontext
    from pathlib import Path

    from rich.live import Live

    from drainsafe.shell import console, output_dir_problem
    from drainsafe.verify.load import LoadSpec
    from drainsafe.verify.report import LiveView, print_summary
    from drainsafe.verify.session import ProbeSpec, WatchSpec, verify

    err = console(stderr=True)
    problem = _url_problem(args.url) or _limits_problem(args)
    if problem:
        err.print(f"drainsafe verify: {problem}", markup=False)
        return EXIT_USAGE
    try:
        spec = LoadSpec(
            url=args.url, duration=args.duration, concurrency=args.concurrency, rate=args.rate,
            method=args.method.upper(), body=_body(args), headers=_headers(args.header),
            end_marker=args.stream_end or None, timeout=args.timeout,
            pod_header=args.pod_header or None, max_inflight=args.max_inflight,
            keepalive=not args.no_keepalive,
        )
    except ValueError as exc:
        err.print(f"[red]drainsafe verify: {exc}[/]")
        return EXIT_USAGE
    if args.selector and not args.namespace:
        err.print("[red]drainsafe verify: --selector needs --namespace[/]")
        return EXIT_USAGE
    # Everything that could fail after the load is checked before it: a run is never lost
    # at the end for want of a place to write it, or of an API server to watch.
    problem = output_dir_problem(args.out) if args.out else None
    if problem:
        err.print(f"drainsafe verify: {problem}", markup=False)
        return EXIT_USAGE
    try:
        probe = ProbeSpec(0.0 if args.no_probe else args.probe_rate, args.probe_path)
    except ValueError as exc:
        err.print(f"[red]drainsafe verify: --probe-rate/--probe-path: {exc}[/]")
        return EXIT_USAGE
    watch = (WatchSpec(args.namespace, args.selector, args.kubeconfig, args.context,
                       args.linger, probe, args.metrics_port)
             if args.namespace else None)
    if watch is not None:
        failed = _preflight(watch)
        if failed is not None:
            code, message = failed
            err.print(f"drainsafe verify: {message}", markup=False)
            return code

    view = LiveView(spec.duration)
    show = not args.no_progress and err.is_terminal

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # Ctrl-C, or SIGTERM (a CI job cancelled, a Job deleted): stop sending, let what is
        # in flight finish, keep the record.
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            live = (Live(view, console=err, refresh_per_second=4, transient=True) if show
                    else nullcontext())
            with live:
                return await verify(spec, watch=watch, on_result=view.add,
                                    on_event=view.add_event, stop=stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        with _runner() as runner:
            record = runner.run(main())
    except Exception as exc:  # kubeconfig / API errors: name them, no traceback
        exit_code = watch_failure_exit(exc)
        if exit_code is None:
            raise
        err.print(f"drainsafe verify: watching pods failed: {exc}", style="red", markup=False)
        return exit_code
    if args.out:
        from drainsafe.verify.timeline import HTML_FILE, PNG_FILE, render_html, render_png

        out = Path(args.out)
        record.write(out)
        png = render_png(record, out / PNG_FILE)
        render_html(record, png, out / HTML_FILE)
        err.print(f"record and timeline written to {out}/")
    if args.output == "json":
        data = record.to_json()
        json.dump({**data["summary"], "probe": data["probe_summary"]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_summary(record, console())
    return EXIT_FAILED if record.failed else EXIT_OK


def _url_problem(url: str) -> str | None:
    """Why URL cannot be a load target (None: it can): no scheme, host or valid port."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0..65535
    except ValueError as exc:
        return f"URL {url!r}: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"URL must start with http:// or https:// (got {url!r})"
    if not parts.hostname:
        return f"URL {url!r} has no host; e.g. http://127.0.0.1:8000/path"
    if port == 0:
        return f"URL {url!r}: port 0 cannot be connected to"
    return None


def watch_failure_exit(exc: BaseException) -> int | None:
    """The exit code for an error from watching pods (None: not one verify expects).

    The kubeconfig and its credential plugin are input (EXIT_USAGE); an API server that
    cannot be reached, answers with an error, or does not list within the sync timeout is
    EXIT_API, as for drain and audit."""
    from drainsafe.kube.auth import ExecPluginError
    from drainsafe.kube.client import KubeconfigError
    from drainsafe.kube.errors import KubeError
    from drainsafe.kube.watch import WaitTimeout

    if isinstance(exc, KubeconfigError | ExecPluginError):
        return EXIT_USAGE
    if isinstance(exc, KubeError | WaitTimeout):
        return EXIT_API
    return None


def _preflight(watch: Any) -> tuple[int, str] | None:
    """One pod list with a short timeout before the load: an unreachable API server fails
    here, in seconds, instead of after the informers' 30 s of retries. Runs without
    verify's own SIGINT handler, so Ctrl-C stops it at once (exit 130)."""
    import asyncio

    from drainsafe.kube import KubeClient, KubeconfigError, KubeError, api_path
    from drainsafe.kube.auth import ExecPluginError

    try:
        client = KubeClient.from_kubeconfig(watch.kubeconfig, watch.context,
                                            timeout=PREFLIGHT_SECONDS)
    except (KubeconfigError, ValueError, OSError) as exc:
        return EXIT_USAGE, f"watching pods failed: {exc}"
    params = {"limit": "1"}
    if watch.selector:
        params["labelSelector"] = watch.selector

    async def probe() -> None:
        async with client:
            await client.get(api_path("v1", "pods", namespace=watch.namespace), params)

    try:
        asyncio.run(probe())
    except (KubeError, ExecPluginError) as exc:
        code = watch_failure_exit(exc)
        assert code is not None
        return code, (f"cannot list pods in namespace {watch.namespace!r} at "
                      f"{client.identity.server}: {exc}")
    return None


def _runner() -> Any:
    """uvloop when installed (uvicorn[standard] brings it): less CPU per request."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def _limits_problem(args: argparse.Namespace) -> str | None:
    """The first flag above its limit (None: all within), named as the user typed it."""
    for key, limit in LIMITS.items():
        value = getattr(args, key, None)
        if value is not None and value > limit:
            flag = "--" + key.replace("_", "-")
            return f"{flag} {value:g}: above the limit of {limit:,.0f}"
    return None


def _body(args: argparse.Namespace) -> bytes | None:
    if args.body is not None:
        return str(args.body).encode()
    if args.body_file:
        try:
            with open(args.body_file, "rb") as f:
                body = f.read(MAX_BODY_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"--body-file {args.body_file}: {exc.strerror}") from exc
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"--body-file {args.body_file}: over the "
                             f"{MAX_BODY_BYTES // 1024 // 1024} MiB limit")
        return body
    return None


def _headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {value!r}: expected NAME:VALUE")
        out.append((name.strip(), content.strip()))
    return tuple(out)


def run_tune(args: argparse.Namespace) -> int:
    from drainsafe.verify.tune_cli import run

    return int(run(args))
