"""The process shell behind `drainsafe lab up|status|down` (pid file, detach, signals)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from drainsafe.lab.features import FeatureGates, UnknownFeatureGate
from drainsafe.shell import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

PID_FILE = "lab.pid"
STATUS_FILE = "lab.json"
"""In the state directory: the running lab's pid, and its status for `lab status`."""
DETACH_TIMEOUT = 90.0
DOWN_TIMEOUT = 60.0


def _err(message: str) -> None:
    print(f"drainsafe lab: {message}", file=sys.stderr)


def running_pid(state_dir: Path) -> int | None:
    """The pid in the pid file, if that process is alive and is a drainsafe lab."""
    try:
        pid = int((state_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"drainsafe" in cmdline else None


def _validate(args: argparse.Namespace) -> str | None:
    from drainsafe.lab.netpath.propagation import Propagation

    if args.nodes < 1 or args.nodes > 256:
        return f"--nodes {args.nodes}: must be between 1 and 256"
    if args.gpus_per_node < 0:
        return f"--gpus-per-node {args.gpus_per_node}: must be >= 0"
    try:
        Propagation.parse(str(args.propagation_seconds))
    except ValueError as exc:
        return f"--propagation-seconds: {exc}"
    if not args.node_lease_seconds > 0:
        return f"--node-lease-seconds {args.node_lease_seconds:g}: must be > 0"
    if not args.node_monitor_grace_seconds > 0:
        return f"--node-monitor-grace-seconds {args.node_monitor_grace_seconds:g}: must be > 0"
    if args.toleration_seconds < 0:
        return f"--toleration-seconds {args.toleration_seconds}: must be >= 0"
    try:
        FeatureGates.parse(args.feature_gates)
    except UnknownFeatureGate as exc:
        return f"--feature-gates: {exc}"
    return None


def up(args: argparse.Namespace) -> int:
    problem = _validate(args)
    if problem:
        _err(problem)
        return EXIT_USAGE
    state_dir = Path(args.state_dir).resolve()
    pid = running_pid(state_dir)
    if pid is not None:
        _err(f"a lab is already running in {state_dir} (pid {pid}); "
             "stop it with `drainsafe lab down`")
        return EXIT_FAILED
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATUS_FILE).unlink(missing_ok=True)
    if args.detach:
        return _detach(args, state_dir)
    try:
        return asyncio.run(_serve(args, state_dir))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _detach(args: argparse.Namespace, state_dir: Path) -> int:
    argv = [sys.executable, "-m", "drainsafe", "lab", "up", "--nodes", str(args.nodes),
            "--gpus-per-node", str(args.gpus_per_node),
            "--propagation-seconds", str(args.propagation_seconds),
            "--feature-gates", args.feature_gates, "--state-dir", str(state_dir),
            "--node-lease-seconds", str(args.node_lease_seconds),
            "--node-monitor-grace-seconds", str(args.node_monitor_grace_seconds),
            "--toleration-seconds", str(args.toleration_seconds)]
    if args.no_ingress:
        argv.append("--no-ingress")
    if args.device_plugin:
        argv.append("--device-plugin")
    if args.with_lws:
        argv.append("--with-lws")
    log_path = state_dir / "lab.log"
    with log_path.open("ab") as log:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True)
    deadline = time.monotonic() + DETACH_TIMEOUT
    while time.monotonic() < deadline:
        # The pid file is written last, once the lab (and its device plugin) is up.
        status = read_status(state_dir)
        if running_pid(state_dir) == child.pid and status is not None:
            print(f"lab running in the background (pid {child.pid})")
            print(f"kubeconfig: {status['kubeconfig']}")
            print(f"  export KUBECONFIG={status['kubeconfig']}")
            return EXIT_OK
        if child.poll() is not None:
            _err(f"the lab exited at start-up (code {child.returncode}); "
                 f"log {log_path}:\n{_tail(log_path)}")
            return EXIT_FAILED
        time.sleep(0.2)
    child.terminate()
    _err(f"the lab did not come up within {DETACH_TIMEOUT:g}s; log {log_path}")
    return EXIT_FAILED


async def _serve(args: argparse.Namespace, state_dir: Path) -> int:
    from drainsafe.lab.cluster import Lab, gpu_device_plugin_daemonset

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    pid_file = state_dir / PID_FILE
    try:
        async with Lab(state_dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                       propagation_seconds=str(args.propagation_seconds),
                       ingress=not args.no_ingress,
                       feature_gates=FeatureGates.parse(args.feature_gates),
                       node_lease_seconds=args.node_lease_seconds,
                       node_monitor_grace_seconds=args.node_monitor_grace_seconds,
                       toleration_seconds=args.toleration_seconds) as lab:
            if args.device_plugin and args.gpus_per_node:
                await lab.apply(gpu_device_plugin_daemonset())
            if args.with_lws:
                await lab.install_leaderworkerset()
            pid_file.write_text(f"{os.getpid()}\n")
            print(f"lab up: {args.nodes} nodes, API {lab.describe()['server']}", flush=True)
            print(f"kubeconfig: {lab.kubeconfig}", flush=True)
            print(f"  export KUBECONFIG={lab.kubeconfig}", flush=True)
            print("Ctrl-C (or `drainsafe lab down`) stops it.", flush=True)
            await stop.wait()
            print("stopping the lab...", flush=True)
    finally:
        with contextlib.suppress(OSError):
            if running_pid(state_dir) in (None, os.getpid()):
                pid_file.unlink(missing_ok=True)
    return EXIT_OK


def read_status(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def status(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    pid = running_pid(state_dir)
    data = read_status(state_dir)
    if pid is None or data is None or data.get("pid") != pid:
        _err(f"no lab running in {state_dir} (start one with `drainsafe lab up`)")
        return EXIT_FAILED
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    from rich.table import Table

    from drainsafe.shell import console as make_console

    console = make_console()
    console.print(f"lab pid {pid}, API {data.get('server')}")
    console.print(f"kubeconfig: {data['kubeconfig']}")
    low, high = data.get("propagation", [0, 0])
    paths = ", ".join(f"{name} {delay:g}s" for name, delay in data.get("paths", {}).items())
    console.print(f"propagation delay: {low:g}s" if low == high
                  else f"propagation delay: {low:g}-{high:g}s, drawn per path: {paths}")
    nodes = Table(title="Nodes")
    for col in ("name", "hostIP", "gpus"):
        nodes.add_column(col)
    for n in data.get("nodes", []):
        nodes.add_row(n["name"], n["hostIP"], str(n["gpus"]))
    console.print(nodes)
    services = Table(title="Services")
    for col in ("namespace", "name", "ClusterIP:port", "ingress URL", "endpoints"):
        services.add_column(col)
    for s in data.get("services", []):
        services.add_row(s["namespace"], s["name"], s["clusterIP"], s.get("ingress") or "-",
                         str(s["endpoints"]))
    console.print(services)
    return EXIT_OK


def down(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve()
    pid = running_pid(state_dir)
    if pid is None:
        _err(f"no lab running in {state_dir}")
        (state_dir / PID_FILE).unlink(missing_ok=True)
        return EXIT_FAILED
    leftovers = (read_status(state_dir) or {}).get("pids", [])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        _err(f"lab pid {pid} did not stop in {DOWN_TIMEOUT:g}s; killing it and its pods")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        for child in leftovers:  # container process groups the lab reported
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(child), signal.SIGKILL)
    (state_dir / PID_FILE).unlink(missing_ok=True)
    print(f"lab stopped (pid {pid})")
    return EXIT_OK


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
