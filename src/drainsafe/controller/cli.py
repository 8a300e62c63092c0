"""`drainsafe controller`: the eviction guard that makes every drainer make-before-break."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    c = subparsers.add_parser(
        "controller", help="run the eviction guard (admission webhook on pods/eviction)",
        description="Answer pods/eviction admission reviews: hold the eviction of an "
        "opted-in pod (label drainsafe.io/guard=true on the pod or its namespace) with 429 "
        "while a stand-in is surged and becomes Ready and Available, then allow it and "
        "restore the scale. Runs in the cluster (deploy/controller).")
    c.add_argument("--namespace", default="drainsafe-system",
                   help="where the Service, Secret and Lease live (default drainsafe-system)")
    c.add_argument("--service", default="drainsafe-controller", help="the webhook's Service")
    c.add_argument("--webhook-config", default="drainsafe-guard",
                   help="the ValidatingWebhookConfiguration to write the CA into")
    c.add_argument("--tls-secret", default="drainsafe-controller-tls",
                   help="the Secret holding the shared serving certificate")
    c.add_argument("--lease", default="drainsafe-controller", help="the leader Lease")
    c.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    c.add_argument("--port", type=int, default=8443, help="HTTPS port of the webhook")
    c.add_argument("--metrics-port", type=int, default=9090,
                   help="HTTP port of /metrics (0: none)")
    c.add_argument("--hold-limit", type=float, default=600.0, metavar="S",
                   help="release a hold that cannot succeed after S seconds (default 600; "
                   "EKS fails a node after 15 min of refused evictions)")
    c.add_argument("--retry-after", type=int, default=0, metavar="S",
                   help="Retry-After on a hold (default 0: none, so kubectl drain prints the "
                   "guard's message every 5 s instead of client-go retrying silently)")
    c.add_argument("--lease-seconds", type=float, default=15.0)
    c.add_argument("--identity", help="this replica's name (default $POD_NAME or hostname)")
    c.add_argument("-v", "--verbose", action="store_true")
    c.set_defaults(handler=run_controller)


def run_controller(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from drainsafe.controller.app import run
    from drainsafe.controller.config import ControllerConfig

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    extra = {"identity": args.identity} if args.identity else {}
    cfg = ControllerConfig(
        namespace=args.namespace, service=args.service, webhook_config=args.webhook_config,
        tls_secret=args.tls_secret, lease=args.lease, host=args.host, port=args.port,
        metrics_port=args.metrics_port, hold_limit=args.hold_limit,
        retry_after=args.retry_after, lease_seconds=args.lease_seconds, **extra)
    return asyncio.run(run(cfg))
