"""The lab's secrets and logs are its user's alone (issue 18): the kubeconfig (whose token
runs any command as the lab's user) and the TLS key are new 0600 files, never written into
an existing file or through a symbolic link; pod log directories are 0700."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from drainsafe.lab.apiserver.tls import make_tls
from drainsafe.lab.cluster import Lab, virtual_deployment
from drainsafe.lab.controlplane import ControlPlane
from drainsafe.lab.secretfile import write_secret


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _regular(path: Path) -> bool:
    return stat.S_ISREG(os.lstat(path).st_mode)


def test_tls_key_replaces_a_world_readable_file(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "server.key").write_text("old")
    os.chmod(pki / "server.key", 0o644)
    files = make_tls(pki)
    assert _mode(files.server_key) == 0o600 and _regular(files.server_key)
    assert files.server_key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


def test_tls_key_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("someone else's file")
    os.chmod(victim, 0o644)
    (pki / "server.key").symlink_to(victim)
    files = make_tls(pki)
    assert victim.read_text() == "someone else's file" and _mode(victim) == 0o644
    assert _regular(files.server_key) and _mode(files.server_key) == 0o600


def test_kubeconfig_replaces_an_existing_file_and_a_symlink(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "state")
    cp.url = "https://127.0.0.1:6443"  # write_kubeconfig needs only the address
    existing = tmp_path / "kubeconfig"
    existing.write_text("old")
    os.chmod(existing, 0o644)
    cp.write_kubeconfig(existing)
    assert _mode(existing) == 0o600 and cp.token in existing.read_text()

    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.chmod(victim, 0o644)
    link = tmp_path / "linked-kubeconfig"
    link.symlink_to(victim)
    cp.write_kubeconfig(link)
    assert victim.read_text() == "keep" and _mode(victim) == 0o644
    assert _regular(link) and _mode(link) == 0o600 and cp.token in link.read_text()


def test_secret_left_nothing_behind_and_umask_cannot_widen_it(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_secret(tmp_path / "s", b"x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "s") == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no temp file left


async def test_lab_up_over_old_files_and_links_keeps_secrets_private(tmp_path: Path) -> None:
    state = tmp_path / "lab"
    (state / "pki").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("not for the token")
    (state / "kubeconfig").symlink_to(victim)
    (state / "pki" / "server.key").write_text("old")
    os.chmod(state / "pki" / "server.key", 0o644)
    (state / "pods").mkdir(mode=0o755)
    os.chmod(state / "pods", 0o755)  # a lab from before: world-readable logs
    async with Lab(state, nodes=1, propagation_seconds=0.1, ingress=False) as lab:
        assert victim.read_text() == "not for the token"
        assert _regular(state / "kubeconfig") and _mode(state / "kubeconfig") == 0o600
        assert _mode(state / "pki" / "server.key") == 0o600
        assert _mode(state / "pki") == 0o700
        await lab.apply(virtual_deployment("v", replicas=1, startup_seconds=0.1))
        await lab.wait_available("default", "v", timeout=30)
        assert lab.nodes is not None
        [worker] = [w for k in lab.nodes.kubelets.values() for w in k.pods.values()]
        assert _mode(state / "pods") == 0o700
        assert _mode(worker.dir) == 0o700
