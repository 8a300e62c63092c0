"""The controller's settings, in one place (uvicorn's Config pattern)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field


def _identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


@dataclass(frozen=True)
class ControllerConfig:
    namespace: str = "drainsafe-system"
    service: str = "drainsafe-controller"
    webhook_config: str = "drainsafe-guard"
    tls_secret: str = "drainsafe-controller-tls"
    lease: str = "drainsafe-controller"
    host: str = "0.0.0.0"
    port: int = 8443
    metrics_port: int = 9090  # 0: no metrics listener
    hold_limit: float = 600.0  # seconds before a hold that cannot succeed is released
    retry_after: int = 0  # Retry-After on a hold; 0: none (see docs/controller.md)
    lease_seconds: float = 15.0
    retry_seconds: float = 2.0
    reconcile_seconds: float = 0.5
    identity: str = field(default_factory=_identity)
