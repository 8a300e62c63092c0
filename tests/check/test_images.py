"""Servers known by their image: args only, with and without the server's drain flag.

The images' entrypoints and the flags' first releases are in drainsafe.check.servers'
docstring, each with the source it was read at.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from check_manifests import SLEEP10, check, container, deployment, of, pdb, service

from drainsafe.check.servers import command_line, identify, server_image

VLLM = "vllm/vllm-openai"
TGI = "ghcr.io/huggingface/text-generation-inference"
SGLANG = "lmsysorg/sglang"
TRITON = "nvcr.io/nvidia/tritonserver"


def served(image: str, args: list[str], *, grace: int = 120, **kw: Any) -> list[dict[str, Any]]:
    c = container(image=image, args=args, pre_stop=SLEEP10, **kw)
    return [deployment(grace=grace, containers=[c]), service(), pdb()]


def patched_container(fix: str) -> dict[str, Any]:
    found = yaml.safe_load(fix.split("\n#")[0])
    containers: list[dict[str, Any]] = found["spec"]["template"]["spec"]["containers"]
    return containers[0]


@pytest.mark.parametrize("image, server, release", [
    ("vllm/vllm-openai:v0.18.0", "vllm", (0, 18, 0)),
    ("docker.io/vllm/vllm-openai:v0.11.0", "vllm", (0, 11, 0)),
    ("vllm/vllm-openai:latest", "vllm", None),
    ("vllm/vllm-openai@sha256:" + "a" * 64, "vllm", None),
    (f"{TGI}:3.3.6", "tgi", (3, 3, 6)),
    (f"{TGI}:2.4.1-rocm", "tgi", (2, 4, 1)),
    (f"{SGLANG}:v0.5.5-cu129", "sglang", (0, 5, 5)),
    (f"{TRITON}:24.08-py3", "triton", (24, 8)),
])
def test_server_image(image: str, server: str, release: tuple[int, ...] | None) -> None:
    found = server_image(image)
    assert found is not None and (found.server, found.release) == (server, release)


def test_unknown_images() -> None:
    assert server_image("example/vllm-openai:v0.18.0") is None
    assert server_image("registry.local:5000/vllm/vllm-openai:v1") is None
    assert server_image("") is None


# vLLM: the image runs `vllm serve` + args -------------------------------------------------

def test_vllm_image_args_only_aborts() -> None:
    args = ["--model", "m", "--port", "8000"]
    line = command_line(None, args, "vllm/vllm-openai:v0.18.0")
    assert line is not None and line.argv[:2] == ("vllm", "serve")
    found = of(check(*served("vllm/vllm-openai:v0.18.0", args)), "server-aborts-on-sigterm")
    assert len(found) == 1
    fixed = patched_container(found[0].fix)
    # The args list is shown whole, the flag added to what was there.
    assert fixed["args"] == [*args, "--shutdown-timeout=105"]  # 120 - 10 - 5


def test_vllm_image_with_drain_flag_drains() -> None:
    args = ["--model", "m", "--shutdown-timeout", "90"]
    findings = check(*served("vllm/vllm-openai:v0.18.0", args))
    assert not of(findings, "server-aborts-on-sigterm")
    assert not of(findings, "grace-budget")  # 10 + 90 + 5 <= 120
    assert of(check(*served("vllm/vllm-openai:v0.18.0", args, grace=100)), "grace-budget")


def test_vllm_image_before_the_flag_gets_drainsafe_run() -> None:
    # v0.11.0 has no --shutdown-timeout (added in v0.18.0): adding it would stop the server.
    found = of(check(*served("vllm/vllm-openai:v0.11.0", ["--model", "m"])),
               "server-aborts-on-sigterm")
    assert len(found) == 1 and "--shutdown-timeout=" not in found[0].fix
    fixed = patched_container(found[0].fix)
    assert fixed["command"][:2] == ["drainsafe", "run"]
    assert fixed["command"][-3:] == ["--", "vllm", "serve"]
    assert "args" not in fixed  # the container's args follow the wrapped command as before
    assert {"name": "drainsafe-admin", "containerPort": 8490} in fixed["ports"]


def test_vllm_image_unknown_release_names_the_release_needed() -> None:
    found = of(check(*served("vllm/vllm-openai:latest", ["--model", "m"])),
               "server-aborts-on-sigterm")
    assert found and "--shutdown-timeout=" in found[0].fix
    assert "vllm >= 0.18.0" in found[0].fix


def test_image_entrypoint_not_used_with_command() -> None:
    # `command` replaces the image's ENTRYPOINT: a shell here is not vLLM.
    c = container(image="vllm/vllm-openai:v0.18.0", command=["python3", "tool.py"])
    assert not of(check(deployment(grace=60, containers=[c]), service(), pdb()),
                  "server-aborts-on-sigterm")


# TGI: /tgi-entrypoint.sh execs text-generation-launcher with the args -----------------------

def test_tgi_image_args_only_default_90s() -> None:
    line = command_line(None, ["--model-id", "m"], f"{TGI}:3.3.6")
    found = identify(line)
    assert found is not None and (found.server, found.deadline, found.drains) == (
        "tgi", 90.0, True)
    short = of(check(*served(f"{TGI}:3.3.6", ["--model-id", "m"], grace=200),
                     max_request_seconds=120), "shutdown-deadline-short")
    assert short
    assert patched_container(short[0].fix)["args"] == [
        "--model-id", "m", "--graceful-termination-timeout=120"]


def test_tgi_image_with_drain_flag() -> None:
    args = ["--model-id", "m", "--graceful-termination-timeout", "120"]
    findings = check(*served(f"{TGI}:3.3.6", args, grace=140), max_request_seconds=120)
    assert not of(findings, "shutdown-deadline-short")
    assert not of(findings, "grace-budget")  # 10 + 120 + 5 <= 140
    assert of(check(*served(f"{TGI}:3.3.6", args, grace=130), max_request_seconds=120),
              "grace-budget")


def test_tgi_before_the_flag_gets_drainsafe_run() -> None:
    # --graceful-termination-timeout first shipped in v3.2.2; 2.4.1 waits a fixed 90 s.
    short = of(check(*served(f"{TGI}:2.4.1", ["--model-id", "m"], grace=200),
                     max_request_seconds=120), "shutdown-deadline-short")
    assert short and "--graceful-termination-timeout" not in short[0].fix
    command = patched_container(short[0].fix)["command"]
    assert command[:2] == ["drainsafe", "run"] and command[-2:] == ["--",
                                                                    "text-generation-launcher"]


# SGLang: no ENTRYPOINT; args start the server, which waits without a deadline ----------------

SGLANG_ARGS = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "8000"]


def test_sglang_image_args_only() -> None:
    found = identify(command_line(None, SGLANG_ARGS, f"{SGLANG}:v0.5.5"))
    assert found is not None and (found.server, found.deadline) == ("sglang", None)
    # No deadline of its own: the grace period must hold the longest request.
    assert of(check(*served(f"{SGLANG}:v0.5.5", SGLANG_ARGS, grace=60),
                    max_request_seconds=90), "grace-budget")
    assert not of(check(*served(f"{SGLANG}:v0.5.5", SGLANG_ARGS, grace=105),
                        max_request_seconds=90), "grace-budget")
    found = identify(command_line(None, ["sglang", "serve", "--model-path", "m"],
                                  f"{SGLANG}:v0.5.5"))
    assert found is not None and found.server == "sglang"


def test_sglang_image_without_args_runs_no_server() -> None:
    assert command_line(None, None, f"{SGLANG}:v0.5.5") is None


# Triton: nvidia_entrypoint.sh execs the args (tritonserver ...) -------------------------------

TRITON_ARGS = ["tritonserver", "--model-repository=/models"]


def test_triton_image_args_only_default_30s() -> None:
    short = of(check(*served(f"{TRITON}:24.08-py3", TRITON_ARGS), max_request_seconds=90),
               "shutdown-deadline-short")
    assert short and "30s" in short[0].message
    assert patched_container(short[0].fix)["args"] == [*TRITON_ARGS, "--exit-timeout-secs=90"]


def test_triton_image_with_drain_flag() -> None:
    args = [*TRITON_ARGS, "--exit-timeout-secs", "90"]
    findings = check(*served(f"{TRITON}:24.08-py3", args), max_request_seconds=90)
    assert not of(findings, "shutdown-deadline-short")
    assert not of(findings, "grace-budget")


@pytest.mark.parametrize("image, args, flag", [
    (f"{VLLM}:v0.11.0", ["--model", "m", "--shutdown-timeout=90"], "--shutdown-timeout"),
    (f"{VLLM}:v0.17.1", ["--model", "m", "--shutdown-timeout", "90"], "--shutdown-timeout"),
    (f"{TGI}:3.2.1", ["--model-id", "m", "--graceful-termination-timeout", "90"],
     "--graceful-termination-timeout"),
])
def test_a_drain_flag_older_than_the_release_stops_the_server(
        image: str, args: list[str], flag: str) -> None:
    findings = check(*served(image, args))
    found = of(findings, "deadline-flag-unreleased")
    assert len(found) == 1 and flag in found[0].message, findings
    fixed = patched_container(found[0].fix)
    assert fixed["command"][:2] == ["drainsafe", "run"]
    assert "--shutdown-timeout" in fixed["command"]  # drainsafe run's own, before the "--"
    child = fixed["command"][fixed["command"].index("--") + 1:]
    assert flag not in " ".join(child)
    assert fixed["args"] == [a for a in args if a not in (flag, "90")
                             and not a.startswith(flag + "=")]  # whole, without the flag


@pytest.mark.parametrize("image, args", [
    (f"{VLLM}:v0.18.0", ["--model", "m", "--shutdown-timeout=90"]),
    (f"{VLLM}:latest", ["--model", "m", "--shutdown-timeout=90"]),  # release unknown
    (f"{TGI}:3.2.2", ["--model-id", "m", "--graceful-termination-timeout", "90"]),
    (f"{VLLM}:v0.11.0", ["--model", "m"]),  # no flag: server-aborts-on-sigterm's case
])
def test_a_drain_flag_the_release_has_is_fine(image: str, args: list[str]) -> None:
    assert not of(check(*served(image, args)), "deadline-flag-unreleased")


def _deadline_fixes(objs: list[dict[str, Any]], **context: Any) -> list[str]:
    findings = check(*objs, **context)
    return [f.fix for f in findings
            if f.rule in ("deadline-flag-unreleased", "server-aborts-on-sigterm")]


_OLD_VLLM = (f"{VLLM}:v0.11.0", ["--model", "m", "--shutdown-timeout=90"])


@pytest.mark.parametrize("objs, context", [
    (served(*_OLD_VLLM, grace=120), {}),
    (served(*_OLD_VLLM, grace=90, name="api"), {}),
    (served(f"{VLLM}:v0.11.0", ["--model", "n", "--shutdown-timeout=90"], grace=90), {}),
    (served(f"{VLLM}:v0.11.0", ["m", "--shutdown-timeout=90"], grace=90,
            command=["/usr/bin/vllm", "serve", "--model"]), {}),  # the same argv, split apart
    (served(*_OLD_VLLM, grace=90, command=["vllm", "serve", "m"]), {}),
    (served(*_OLD_VLLM, grace=90, readiness={"exec": {"command": ["true"]}}), {}),
    ([deployment(grace=90, containers=[container(image=_OLD_VLLM[0], args=_OLD_VLLM[1],
                                                 pre_stop={"sleep": {"seconds": 20}})]),
      service(), pdb()], {}),
    ([deployment(grace=90, containers=[container(image=_OLD_VLLM[0], args=_OLD_VLLM[1])]),
      service(), pdb()], {"propagation_seconds": 8}),
    (served(*_OLD_VLLM, grace=90), {"buffer_seconds": 9}),
    (served(f"{VLLM}:v0.18.0", ["--model", "m"], grace=90), {}),  # the flag, no note
    (served(f"{VLLM}:latest", ["--model", "m"], grace=90), {}),  # the flag, with a note
])
def test_a_kept_deadline_fix_is_the_one_made_for_its_server(
        objs: list[dict[str, Any]], context: dict[str, Any]) -> None:
    # deadline_fix keeps its snippets: one kept for another server (grace, name, args,
    # command and args apart, probe, drain delay, context, release) must not be handed out here.
    from drainsafe.check.rules import termination
    termination._DEADLINE_FIXES.clear()
    made = _deadline_fixes(objs, **context)
    termination._DEADLINE_FIXES.clear()
    others = _deadline_fixes(served(*_OLD_VLLM, grace=90))
    others += _deadline_fixes(served(f"{VLLM}:latest", ["--model", "m"], grace=90),
                              buffer_seconds=9)
    others += _deadline_fixes(served(*_OLD_VLLM, grace=90, command=["/usr/bin/vllm", "serve"]))
    assert made and not set(made) & set(others)
    assert _deadline_fixes(objs, **context) == made
