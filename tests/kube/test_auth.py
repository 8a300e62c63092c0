"""Exec credential plugins against a real HTTP server that demands the token."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
import yaml

from drainsafe.kube.auth import ExecPluginError
from drainsafe.kube.client import KubeClient, KubeconfigError
from drainsafe.kube.errors import Unauthorized

from .apiserver import FakeApi, kubeconfig, serve

PLUGIN = """#!{python}
import json, os, sys, datetime
state = {state!r}
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open(state + ".info", "w") as f:
    json.dump(info, f)
n = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(n + 1))
lifetime = float(os.environ.get("TOKEN_LIFETIME", "3600"))
exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime)
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
  "status": {{"token": "tok-%d" % (n + 1),
             "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
"""


def write_plugin(tmp: Path) -> tuple[Path, Path]:
    state = tmp / "count"
    script = tmp / "plugin.py"
    script.write_text(PLUGIN.format(python=sys.executable, state=str(state)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, state


def write_config(tmp: Path, server: str, user: dict[str, object]) -> Path:
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(server, user)))
    return path


def exec_user(script: Path, version: str = "client.authentication.k8s.io/v1",
              lifetime: str = "3600") -> dict[str, object]:
    return {"exec": {"apiVersion": version, "command": str(script), "interactiveMode": "Never",
                     "provideClusterInfo": True,
                     "env": [{"name": "TOKEN_LIFETIME", "value": lifetime}]}}


async def test_exec_v1_token_is_used_and_cached(tmp_path: Path) -> None:
    script, state = write_plugin(tmp_path)
    api = FakeApi(token="tok-1")
    async with serve(api) as url:
        cfg = write_config(tmp_path, url, exec_user(script))
        async with KubeClient.from_kubeconfig(str(cfg)) as client:
            for _ in range(3):
                await client.list("/api/v1/pods")
    assert state.read_text() == "1"  # one plugin run for three requests
    info = json.loads((tmp_path / "count.info").read_text())
    assert info["apiVersion"] == "client.authentication.k8s.io/v1"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == url


async def test_token_near_expiry_is_refreshed_before_use(tmp_path: Path) -> None:
    script, state = write_plugin(tmp_path)
    api = FakeApi(token=None)
    async with serve(api) as url:
        # 30 s lifetime is inside the 60 s refresh margin: every request refreshes.
        cfg = write_config(tmp_path, url, exec_user(script, lifetime="30"))
        async with KubeClient.from_kubeconfig(str(cfg)) as client:
            await client.list("/api/v1/pods")
            await client.list("/api/v1/pods")
    assert state.read_text() == "2"
    assert api.seen_tokens[-2:] == ["Bearer tok-1", "Bearer tok-2"]


async def test_401_forces_one_refresh_and_retry(tmp_path: Path) -> None:
    script, state = write_plugin(tmp_path)
    api = FakeApi(token="tok-1")
    async with serve(api) as url:
        cfg = write_config(tmp_path, url, exec_user(script))
        async with KubeClient.from_kubeconfig(str(cfg)) as client:
            await client.list("/api/v1/pods")
            api.token = "tok-2"  # the server rotated credentials
            await client.list("/api/v1/pods")
            api.token = "never"
            with pytest.raises(Unauthorized):
                await client.list("/api/v1/pods")
    assert state.read_text() == "3"


async def test_v1beta1_plugin_and_static_token(tmp_path: Path) -> None:
    script, _ = write_plugin(tmp_path)
    api = FakeApi(token="tok-1")
    async with serve(api) as url:
        cfg = write_config(tmp_path, url, exec_user(
            script, version="client.authentication.k8s.io/v1beta1"))
        async with KubeClient.from_kubeconfig(str(cfg)) as client:
            await client.list("/api/v1/pods")
        api.token = "static"
        cfg = write_config(tmp_path, url, {"token": "static"})
        async with KubeClient.from_kubeconfig(str(cfg)) as client:
            await client.list("/api/v1/pods")


def test_bad_exec_configs_are_refused_with_the_field(tmp_path: Path) -> None:
    script, _ = write_plugin(tmp_path)
    cfg = write_config(tmp_path, "http://127.0.0.1:1", exec_user(
        script, version="client.authentication.k8s.io/v1alpha1"))
    with pytest.raises(ExecPluginError, match="apiVersion"):
        KubeClient.from_kubeconfig(str(cfg))
    always = exec_user(script)
    always["exec"]["interactiveMode"] = "Always"  # type: ignore[index]
    cfg = write_config(tmp_path, "http://127.0.0.1:1", always)
    with pytest.raises(ExecPluginError, match="interactiveMode"):
        KubeClient.from_kubeconfig(str(cfg))
    with pytest.raises(KubeconfigError, match="context 'nope' not found"):
        KubeClient.from_kubeconfig(str(cfg), context="nope")
    with pytest.raises(KubeconfigError, match="does not exist"):
        KubeClient.from_kubeconfig(str(tmp_path / "missing"))


def test_kubeconfig_list_merges_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.write_text(yaml.safe_dump(kubeconfig("http://127.0.0.1:1", {"token": "a"})))
    other = kubeconfig("http://127.0.0.2:2", {"token": "b"})
    other["contexts"].append({"name": "second", "context": {"cluster": "fake", "user": "me"}})
    other["current-context"] = "second"
    b.write_text(yaml.safe_dump(other))
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    client = KubeClient.from_kubeconfig()
    assert client.identity.context == "fake"
    assert client.identity.server == "http://127.0.0.1:1"
    second = KubeClient.from_kubeconfig(context="second")
    assert second.identity.server == "http://127.0.0.1:1"  # cluster "fake" from a wins
