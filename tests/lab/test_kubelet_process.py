"""Container processes: $(VAR) expansion, downward API env, logs, virtual settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from drainsafe.lab.node.process import (
    ContainerConfigError,
    PodContext,
    ProcessContainer,
    container_argv,
    container_env,
    expand,
    process_environment,
    virtual_settings,
)

CTX = PodContext(name="web-1", namespace="ml", uid="u1", node_name="gpu-0",
                 pod_ip="127.10.3.7", host_ip="127.10.3.1", labels={"app": "web"})

POD_IP_ENV = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)", "x"),
    ("a$(A)b$(B)c", "axbyc"),
    ("$(MISSING)", "$(MISSING)"),       # undefined: left as written
    ("$$(A)", "$(A)"),                  # escaped
    ("$$", "$"),
    ("cost: 5$", "cost: 5$"),           # trailing $
    ("$A", "$A"),                       # shell syntax is not expanded
    ("$(A", "$(A"),                     # unclosed
    ("$()", "$()"),
    ("$(A)$(A)", "xx"),
])
def test_expand_like_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "x", "B": "y"}) == expected


def test_env_downward_api_and_ordered_expansion() -> None:
    container = {"name": "srv", "env": [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "ADDR", "value": "$(POD_IP):8000"},
        {"name": "LATER_REF", "value": "$(DEFINED_AFTER)"},
        {"name": "DEFINED_AFTER", "value": "z"},
    ]}
    env = container_env(container, CTX)
    assert env["POD_IP"] == "127.10.3.7" and env["NAME"] == "web-1" and env["NS"] == "ml"
    assert env["NODE"] == "gpu-0" and env["APP"] == "web"
    assert env["ADDR"] == "127.10.3.7:8000"
    assert env["LATER_REF"] == "$(DEFINED_AFTER)"  # only earlier entries are visible


def test_argv_expansion_uses_the_whole_env() -> None:
    container = {"name": "srv", "command": ["python", "-m", "http.server"],
                 "args": ["--bind", "$(POD_IP)", "$(PORT)"],
                 "env": [POD_IP_ENV, {"name": "PORT", "value": "8080"}]}
    env = container_env(container, CTX)
    assert container_argv(container, env) == ["python", "-m", "http.server", "--bind",
                                              "127.10.3.7", "8080"]


def test_bad_container_specs_are_named() -> None:
    with pytest.raises(ContainerConfigError, match="'srv' has no command"):
        container_argv({"name": "srv", "image": "vllm/vllm-openai"}, {})
    with pytest.raises(ContainerConfigError, match=r"env\[0\] \(TOKEN\) valueFrom.secretKeyRef"):
        container_env({"name": "srv", "env": [{"name": "TOKEN", "valueFrom": {
            "secretKeyRef": {"name": "s", "key": "k"}}}]}, CTX)
    with pytest.raises(ContainerConfigError, match=r"status\.bogus"):
        container_env({"name": "srv", "env": [{"name": "X", "valueFrom": {
            "fieldRef": {"fieldPath": "status.bogus"}}}]}, CTX)


def test_virtual_settings() -> None:
    assert virtual_settings({"metadata": {}}) is None
    pod = {"metadata": {"annotations": {"lab.drainsafe.io/virtual": "true",
                                        "lab.drainsafe.io/startup-seconds": "1.5",
                                        "lab.drainsafe.io/exit-after-sigterm-seconds": "3"}}}
    settings = virtual_settings(pod)
    assert settings is not None
    assert settings.startup_seconds == 1.5 and settings.exit_after_sigterm_seconds == 3
    pod["metadata"]["annotations"]["lab.drainsafe.io/startup-seconds"] = "soon"
    with pytest.raises(ContainerConfigError, match="startup-seconds: 'soon'"):
        virtual_settings(pod)


async def test_process_runs_with_env_and_logs_to_its_file(tmp_path: Path) -> None:
    container = {"name": "srv", "command": [sys.executable, "-c"],
                 "args": ["import os; e = os.environ; print('ip', e['POD_IP'], e['HOSTNAME'])"],
                 "env": [POD_IP_ENV]}
    env = container_env(container, CTX)
    log = tmp_path / "pods" / "ml_web-1" / "srv.log"
    proc = ProcessContainer(container_argv(container, env), env=process_environment(env, CTX),
                            cwd=tmp_path / "pods" / "ml_web-1" / "srv", log_path=log)
    await proc.start()
    assert await proc.wait() == 0
    assert log.read_text().strip() == "ip 127.10.3.7 web-1"
    assert proc.returncode == 0 and proc.pid is not None and proc.pid != os.getpid()


async def test_missing_executable_is_a_config_error(tmp_path: Path) -> None:
    proc = ProcessContainer(["/nonexistent/server"], env={}, cwd=tmp_path, log_path=tmp_path / "l")
    with pytest.raises(ContainerConfigError, match="/nonexistent/server"):
        await proc.start()


def test_pod_ips_skip_taken_ports_and_do_not_reuse_at_once() -> None:
    from drainsafe.lab.node.podip import PodIPExhausted, PodIPs, host_ip

    ips = PodIPs(subnet=251)
    assert host_ip(251) == "127.10.251.1"
    first = ips.allocate("a")
    assert first == "127.10.251.2"
    # Another process holds port P on the next address: that address is skipped for a pod
    # declaring P.
    import socket
    with socket.socket() as s:
        s.bind(("127.10.251.3", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ips.allocate("b", [port]) == "127.10.251.4"
    ips.release(first)
    assert ips.allocate("c") == "127.10.251.5"  # round-robin: .2 is not handed out at once
    for uid in range(300):
        try:
            ips.allocate(f"x{uid}")
        except PodIPExhausted as exc:
            assert "127.10.251.0/24" in str(exc)
            break
    else:
        raise AssertionError("the /24 never ran out")
