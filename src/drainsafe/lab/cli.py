"""`drainsafe lab up|status|down`: a local cluster whose pods are processes."""

from __future__ import annotations

import argparse
import os
from typing import Any

from drainsafe.shell import EXIT_USAGE

DEFAULT_STATE_DIR = os.path.join(os.path.expanduser("~"), ".drainsafe", "lab")


def register(subparsers: Any) -> None:
    lab = subparsers.add_parser(
        "lab", help="run a local Kubernetes-compatible cluster whose pods are processes",
        description="A local cluster for rehearsing drains: an API server kubectl talks to, "
        "controllers, one kubelet per node running pods as local processes, a ClusterIP "
        "(kube-proxy-like) path and an nginx ingress path with a propagation delay.")
    sub = lab.add_subparsers(dest="lab_command", metavar="ACTION")

    def state_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", default=os.environ.get("DRAINSAFE_LAB_DIR",
                                                             DEFAULT_STATE_DIR),
                       help="where the kubeconfig, pod logs and pid file live "
                       "(default: $DRAINSAFE_LAB_DIR or %(default)s)")

    up = sub.add_parser("up", help="start a lab (foreground until Ctrl-C, or --detach)")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--gpus-per-node", type=int, default=0,
                    help="nvidia.com/gpu capacity of each node (default 0)")
    up.add_argument("--propagation-seconds", default="1",
                    help="endpoint propagation delay of each traffic path: seconds (1.5) or a "
                    "range drawn per path (0.5-3); default 1")
    up.add_argument("--no-ingress", action="store_true", help="no nginx ingress path")
    up.add_argument("--feature-gates", default="", metavar="NAME=BOOL,...",
                    help="version-dependent behaviour, as on kube-apiserver: "
                    "MaxUnavailableStatefulSet=true behaves as Kubernetes >= 1.35 "
                    "(default: as the v1.31 the lab reports)")
    up.add_argument("--node-lease-seconds", type=float, default=40.0, metavar="S",
                    help="the kubelets' nodeLeaseDurationSeconds; each renews its Lease "
                    "every quarter of it (default %(default)g)")
    up.add_argument("--node-monitor-grace-seconds", type=float, default=50.0, metavar="S",
                    help="kube-controller-manager's --node-monitor-grace-period: a node "
                    "silent this long is Ready=Unknown and tainted unreachable "
                    "(default %(default)g)")
    up.add_argument("--toleration-seconds", type=int, default=300, metavar="N",
                    help="the not-ready/unreachable tolerationSeconds admission gives pods "
                    "(kube-apiserver's --default-*-toleration-seconds; default %(default)s)")
    up.add_argument("--device-plugin", action="store_true",
                    help="also create a GPU device-plugin DaemonSet on the GPU nodes")
    up.add_argument("--with-lws", action="store_true",
                    help="install the LeaderWorkerSet CRD (lws v0.10.0; the lab runs its "
                    "controller); the same as applying deploy/lab/leaderworkerset-crd.yaml")
    up.add_argument("--detach", action="store_true",
                    help="run in the background (pid file in the state dir); stop with "
                    "`drainsafe lab down`")
    state_dir(up)
    up.set_defaults(handler=_up)

    status = sub.add_parser("status", help="show the running lab: kubeconfig, nodes, services")
    state_dir(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=_status)

    down = sub.add_parser("down", help="stop the lab started with --detach")
    state_dir(down)
    down.set_defaults(handler=_down)

    node = sub.add_parser("node", help="act on a lab node as its machine would")
    node_sub = node.add_subparsers(dest="node_command", metavar="ACTION")
    reboot = node_sub.add_parser(
        "reboot", help="reboot a node: NotReady, then a new boot ID (and kubelet version), "
        "Ready", description="Reboot a lab node as the API sees a real reboot: Ready=False "
        "for --down-seconds, then status.nodeInfo.bootID changes (and kubeletVersion, with "
        "--kubelet-version: an upgrade), a NodeRebooted event, Ready=True. Waits until the "
        "node is back; exit 0, 1 if not within --timeout, 3 on an API error.")
    reboot.add_argument("node", metavar="NODE")
    reboot.add_argument("--kubelet-version", default="", metavar="VERSION",
                        help="the version the kubelet reports after the boot (an upgrade)")
    reboot.add_argument("--down-seconds", type=float, default=0.5, metavar="S",
                        help="how long the node stays NotReady (default %(default)s)")
    reboot.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="wait at most this long for the node to be back (default 60)")
    reboot.add_argument("--kubeconfig", default=None,
                        help="the lab's kubeconfig (default: the one in --state-dir)")
    state_dir(reboot)
    reboot.set_defaults(handler=_reboot)
    cut = node_sub.add_parser(
        "cut-off", help="cut a node off from the API server: its heartbeats stop",
        description="Cut a lab node off from the API server, as a network partition or a "
        "hung kubelet does: its kubelet stops renewing its Lease and posting status, its "
        "containers run on. After the node monitor grace period the node is Ready=Unknown "
        "and tainted node.kubernetes.io/unreachable (NoSchedule, NoExecute); its pods are "
        "deleted as their tolerationSeconds run out. `drainsafe lab node reconnect` ends "
        "it. With --wait, waits until Ready=Unknown; exit 0, 1 if not within --timeout, "
        "3 on an API error.")
    cut.add_argument("node", metavar="NODE")
    cut.add_argument("--wait", action="store_true",
                     help="wait until the control plane marks the node Ready=Unknown")
    reconnect = node_sub.add_parser(
        "reconnect", help="end a node's cut-off: heartbeats resume, Ready, taints removed",
        description="Reconnect a lab node cut off with `drainsafe lab node cut-off`: its "
        "kubelet renews its Lease and posts Ready, the unreachable taints come off, and it "
        "finishes the pod deletions it missed. Waits until the node is Ready; exit 0, 1 if "
        "not within --timeout, 3 on an API error.")
    reconnect.add_argument("node", metavar="NODE")
    for p in (cut, reconnect):
        p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                       help="wait at most this long (default 120)")
        p.add_argument("--kubeconfig", default=None,
                       help="the lab's kubeconfig (default: the one in --state-dir)")
        state_dir(p)
    cut.set_defaults(handler=_cut_off)
    reconnect.set_defaults(handler=_reconnect)
    node.set_defaults(handler=lambda args: _usage(node))
    lab.set_defaults(handler=lambda args: _usage(lab))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


def _up(args: argparse.Namespace) -> int:
    from drainsafe.lab.launcher import up

    return up(args)


def _status(args: argparse.Namespace) -> int:
    from drainsafe.lab.launcher import status

    return status(args)


def _down(args: argparse.Namespace) -> int:
    from drainsafe.lab.launcher import down

    return down(args)


def _reboot(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from drainsafe.kube import KubeClient, KubeError, WaitTimeout
    from drainsafe.lab.node import reboot
    from drainsafe.shell import EXIT_API, EXIT_FAILED, EXIT_OK

    kubeconfig = args.kubeconfig or os.path.join(args.state_dir, "kubeconfig")

    async def go() -> int:
        async with KubeClient.from_kubeconfig(kubeconfig) as client:
            before = await reboot.request(client, args.node, reboot.RebootRequest(
                args.kubelet_version, max(0.0, args.down_seconds)))
            boot, version = reboot.boot_facts(before)
            after = await reboot.wait_rebooted(client, args.node, boot, timeout=args.timeout)
            new_boot, new_version = reboot.boot_facts(after)
            print(f"node/{args.node} rebooted: boot ID {boot} -> {new_boot}, kubelet "
                  f"{version} -> {new_version}, Ready")
            return EXIT_OK

    try:
        return asyncio.run(go())
    except WaitTimeout as exc:
        print(f"drainsafe lab node reboot: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (KubeError, OSError) as exc:
        print(f"drainsafe lab node reboot: {exc}", file=sys.stderr)
        return EXIT_API


def _cut_off(args: argparse.Namespace) -> int:
    return _partition(args, cut=True)


def _reconnect(args: argparse.Namespace) -> int:
    return _partition(args, cut=False)


def _partition(args: argparse.Namespace, *, cut: bool) -> int:
    import asyncio
    import sys

    from drainsafe.kube import KubeClient, KubeError, WaitTimeout
    from drainsafe.lab.node import partition
    from drainsafe.shell import EXIT_API, EXIT_FAILED, EXIT_OK

    kubeconfig = args.kubeconfig or os.path.join(args.state_dir, "kubeconfig")
    command = "cut-off" if cut else "reconnect"

    async def go() -> int:
        async with KubeClient.from_kubeconfig(kubeconfig) as client:
            if cut:
                await partition.cut_off(client, args.node)
                if args.wait:
                    await partition.wait_ready(client, args.node, "Unknown",
                                               timeout=args.timeout)
                    print(f"node/{args.node} cut off: Ready=Unknown")
                else:
                    print(f"node/{args.node} cut off: heartbeats stopped")
            else:
                await partition.reconnect(client, args.node)
                await partition.wait_ready(client, args.node, "True", timeout=args.timeout)
                print(f"node/{args.node} reconnected: Ready")
            return EXIT_OK

    try:
        return asyncio.run(go())
    except WaitTimeout as exc:
        print(f"drainsafe lab node {command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (KubeError, OSError) as exc:
        print(f"drainsafe lab node {command}: {exc}", file=sys.stderr)
        return EXIT_API
