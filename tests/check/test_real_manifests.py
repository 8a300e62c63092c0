"""check over the 8 public GPU inference manifests in ../shared/research/real-manifests/.

They are chart templates: the ones with Helm syntax must be reported as such (exit 2, the
file and line named), not crash; the plain ones are checked. The research copy is not part of
the repository, so the test skips where it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drainsafe.cli import main

# shared/ lies beside the checkout (CI's clone and the main work tree alike); a worktree
# elsewhere names it with DRAINSAFE_REAL_MANIFESTS.
REAL = Path(os.environ.get(
    "DRAINSAFE_REAL_MANIFESTS",
    Path(__file__).resolve().parents[3] / "shared" / "research" / "real-manifests"))
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="research manifests not present")

TEMPLATES = {  # unrendered Helm: reported, not parsed
    "NVIDIA__nim-deploy__helm__nim-llm__templates__deployment.yaml",
    "llm-d-incubation__llm-d-modelservice__charts__llm-d-modelservice__templates__"
    "decode-deployment.yaml",
    "triton-inference-server__server__deploy__k8s-onprem__templates__deployment.yaml",
    "vllm-project__production-stack__helm__templates__deployment-vllm-multi.yaml",
    "vllm-project__vllm__examples__online_serving__chart-helm__templates__deployment.yaml",
}


def test_all_real_manifests_checked_without_crash(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(REAL.glob("*.yaml"))
    assert len(files) == 8
    code = main(["check", "--no-config", "-o", "json", *map(str, files)])
    out, err = capsys.readouterr()
    assert code == 2  # template files are input errors
    for name in TEMPLATES:
        assert f"{name}:" in err and "unrendered Helm template syntax" in err, name
    assert err.count("error: ") == len(TEMPLATES)
    findings = json.loads(out)["findings"]
    by_file: dict[str, set[str]] = {}
    for f in findings:
        by_file.setdefault(Path(f["file"]).name, set()).add(f["rule"])
    sglang = by_file["sgl-project__sglang__docker__k8s-sglang-service.yaml"]
    assert {"single-replica", "rollout-unavailable", "prestop-missing",
            "readiness-missing"} <= sglang
    # Its liveness on /health fails once SGLang drains, but the kubelet (1.21 on) stops
    # liveness probes when the pod terminates: nothing to report at the default 1.34.
    assert "liveness-on-readiness" not in sglang
    kserve = by_file["kserve__kserve__config__llmisvc__config-llm-template.yaml"]
    assert {"server-aborts-on-sigterm", "liveness-on-readiness"} <= kserve
    assert "readiness-missing" in by_file[
        "ray-project__kuberay__ray-operator__config__samples__vllm__ray-service.vllm.yaml"]


def test_one_template_alone_names_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = REAL / "vllm-project__vllm__examples__online_serving__chart-helm__templates__" \
        "deployment.yaml"
    assert main(["check", "--no-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "first at line" in err and "helm template" in err
