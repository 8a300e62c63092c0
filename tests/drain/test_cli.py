"""The CLI, as a user runs it: drainsafe drain/uncordon/audit and `kubectl drainsafe`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from drainsafe.kube import KubeClient
from drainsafe.lab.cluster import virtual_deployment

from .labkit import get_node, gpu_lab, pdb, pods_of

KUBECTL = Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
VENV_BIN = Path(sys.executable).parent


async def run(*argv: str, timeout: float = 90) -> tuple[int, str, str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
           "COLUMNS": "200"}  # rich wraps tables to the terminal width
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


def ds(*args: str) -> list[str]:
    return [sys.executable, "-m", "drainsafe", *args]


async def test_usage_errors_exit_2(tmp_path: Path) -> None:
    code, _, err = await run(*ds("drain"))
    assert code == 2 and "NODE" in err
    code, _, err = await run(*ds("drain", "n1", "--kubeconfig", str(tmp_path / "none")))
    assert code == 2 and "does not exist" in err


async def test_dry_run_json_two_pdbs_and_plugin(tmp_path: Path) -> None:
    async with gpu_lab(tmp_path, nodes=3, gpus=1) as lab:
        await lab.apply(virtual_deployment("llm", replicas=2, gpus=1, grace=120),
                        pdb("llm-a", "llm", maxUnavailable=1),
                        pdb("llm-b", "llm", maxUnavailable=1))
        await lab.wait_available("default", "llm", timeout=60)
        cfg = str(lab.kubeconfig)
        async with KubeClient.from_kubeconfig(cfg) as client:
            node = (await pods_of(client, "llm"))[0]["spec"]["nodeName"]
            code, out, err = await run(*ds("drain", node, "--kubeconfig", cfg, "-o", "json"))
            assert code == 1, err
            doc = json.loads(out)
            [n] = doc["nodes"]
            assert n["refused"] and not n["ok"]
            [blocker] = n["plan"]["blockers"]
            assert blocker["kind"] == "multiple-pdbs"
            assert "default/llm-a, default/llm-b" in blocker["message"]
            assert not (await get_node(client, node))["spec"].get("unschedulable")

            await lab.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                             "metadata": {"name": "llm-b", "namespace": "default"},
                             "spec": {"selector": {"matchLabels": {"app": "none"}}}})
            code, out, err = await run(*ds("drain", node, "--kubeconfig", cfg, "--dry-run"))
            assert code == 0, out + err
            assert "Drain plan" in out and "120s" in out and "replacement on" in out
            # Per workload: the strategy, the surge size and the Ready floor.
            assert "Deployment/default/llm" in out and "surge" in out and "+1" in out
            assert "2/2 (100%)" in out
            code, out, err = await run(*ds("drain", node, "--kubeconfig", cfg, "--dry-run",
                                           "--strategy", "evict", "-o", "json"))
            assert code == 0, out + err
            [w] = json.loads(out)["nodes"][0]["plan"]["workload_plans"]
            assert (w["strategy"], w["surge"], w["floor"], w["replicas"]) == ("evict", 0, 1, 2)
            assert not (await get_node(client, node))["spec"].get("unschedulable")

            if shutil.which("kubectl") or KUBECTL.exists():
                binary = str(KUBECTL) if KUBECTL.exists() else "kubectl"
                code, out, err = await run(binary, "drainsafe", "drain", node, "--dry-run",
                                           "--kubeconfig", cfg)
                assert code == 0, out + err
                assert "Drain plan" in out

            code, out, err = await run(*ds("drain", "--selector",
                                           f"kubernetes.io/hostname={node}", "--kubeconfig",
                                           cfg))
            assert code == 0, out + err
            assert "drained" in out
            code, out, _ = await run(*ds("audit", "--kubeconfig", cfg))
            assert code == 0 and node in out and "NO" in out
            code, out, _ = await run(*ds("uncordon", node, "--kubeconfig", cfg))
            assert code == 0 and "uncordoned" in out
            code, out, _ = await run(*ds("audit", "--kubeconfig", cfg, "-o", "json"))
            assert code == 0 and json.loads(out) == {"nodes": [], "scaled_up": []}


@pytest.mark.parametrize("flag", ["--max-parallel-nodes=0"])
async def test_bad_flags(flag: str) -> None:
    code, _, err = await run(*ds("drain", "n1", flag))
    assert code == 2 and "max-parallel-nodes" in err
