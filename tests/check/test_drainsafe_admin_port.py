"""drainsafe serve/run's admin port in manifests: probes and the preStop drain trigger there
are recognised as drainsafe's, and the fixes point at it (issue 12)."""

from __future__ import annotations

from typing import Any

from check_manifests import check, container, deployment, of, pdb, service

SERVE = ["drainsafe", "serve", "app:app", "--port", "8000", "--drain-delay", "10",
         "--shutdown-timeout", "30"]


def _serve(pre_stop: dict[str, Any] | None = None, *, args: tuple[str, ...] = (),
           **kw: Any) -> dict[str, Any]:
    c = container(command=[*SERVE, *args], pre_stop=pre_stop, **kw)
    c["ports"] = [{"name": "http", "containerPort": 8000},
                  {"name": "drainsafe-admin", "containerPort": 8490}]
    return c


def _drain_hook(port: object) -> dict[str, Any]:
    return {"httpGet": {"path": "/drainsafe/drain", "port": port,
                        "httpHeaders": [{"name": "X-Drainsafe-Token", "value": "t"}]}}


def test_the_drain_trigger_on_the_admin_port_is_the_drain_delay() -> None:
    # 10 s drain delay (the hook answers when it is over) + 30 s + 5 s buffer > 40 s grace.
    for port in ("drainsafe-admin", 8490):
        found = of(check(deployment(grace=40, containers=[_serve(_drain_hook(port))]),
                         service(), pdb()), "grace-budget")
        assert found and found[0].budget is not None, (port, found)
        assert found[0].budget.arithmetic() == "10s + 30s + 5s = 45s > 40s"
    assert not of(check(deployment(grace=45, containers=[_serve(_drain_hook(8490))]),
                        service(), pdb()), "grace-budget")


def test_a_custom_admin_port_is_read_from_the_command_line() -> None:
    c = _serve(_drain_hook(9000), args=("--admin-port", "9000"))
    found = of(check(deployment(grace=40, containers=[c]), service(), pdb()), "grace-budget")
    assert found and found[0].budget is not None
    assert found[0].budget.arithmetic() == "10s + 30s + 5s = 45s > 40s"


def test_a_hook_on_the_applications_port_is_not_the_drain_trigger() -> None:
    # The app's own /drainsafe/drain (if any) is not drainsafe's: its duration is unknown.
    found = of(check(deployment(grace=40, containers=[_serve(_drain_hook("http"))]),
                     service(), pdb()), "grace-budget")
    assert not found or found[0].budget is None or found[0].budget.drain_delay != 10


def test_probe_fixes_for_drainsafe_use_the_admin_port() -> None:
    c = _serve({"sleep": {"seconds": 5}}, ready_probe=False)
    c.pop("readinessProbe", None)
    found = of(check(deployment(grace=60, containers=[c]), service(), pdb()),
               "readiness-missing")
    assert found and "/readyz" in found[0].fix and "8490" in found[0].fix, found
    probe = {"httpGet": {"path": "/readyz", "port": 8000}}
    c = _serve({"sleep": {"seconds": 5}}, readiness=probe, liveness=probe)
    found = of(check(deployment(grace=60, containers=[c]), service(), pdb()),
               "liveness-on-readiness")
    assert found and "/livez" in found[0].fix and "8490" in found[0].fix, found


def test_readiness_must_be_drainsafes_on_the_admin_port() -> None:
    def found(readiness: dict[str, Any], *args: str) -> list[Any]:
        c = _serve({"sleep": {"seconds": 5}}, readiness=readiness, args=args)
        return of(check(deployment(grace=60, containers=[c]), service(), pdb()),
                  "readiness-not-drain-aware")

    # On the application's port (by number or name), or a TCP check: ready while draining.
    for probe in ({"httpGet": {"path": "/health", "port": 8000}},
                  {"httpGet": {"path": "/readyz", "port": "http"}},
                  {"tcpSocket": {"port": 8490}}):
        hits = found(probe)
        assert hits and "8490" in hits[0].fix and "/readyz" in hits[0].fix, probe
    # drainsafe's own: on the admin port by name or number, or a custom admin port.
    assert not found({"httpGet": {"path": "/readyz", "port": "drainsafe-admin"}})
    assert not found({"httpGet": {"path": "/readyz", "port": 8490}})
    hits = found({"httpGet": {"path": "/readyz", "port": 8490}}, "--admin-port", "9000",
                 "--ready-path", "/ready")
    assert hits and "9000" in hits[0].fix and "/ready\n" in hits[0].fix + "\n", hits
    assert not found({"httpGet": {"path": "/ready", "port": 9000}}, "--admin-port", "9000")
