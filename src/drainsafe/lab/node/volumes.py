"""A pod's directories on a lab node: its own, keyed by UID, and the volumes it mounts.

The kubelet keys everything of a pod by its UID, never by its name (kubernetes
pkg/kubelet/kubelet_getters.go getPodDir: <root>/pods/<UID>; pkg/kubelet/kuberuntime/
helpers.go BuildPodLogsDirectory: <podLogsDir>/<namespace>_<name>_<UID>, the same in
copies read before and after v1.33), so a pod
deleted and created again under the same name (a StatefulSet's ordinal) starts with
nothing of its predecessor's: a fresh emptyDir, fresh logs. The lab keeps one directory
per pod, named as the kubelet's log directory, <state>/pods/<namespace>_<name>_<UID>,
holding each container's working directory and log, and its emptyDir volumes under
volumes/kubernetes.io~empty-dir/<volume> as in the kubelet's pod directory (medium:
Memory too, on disk; through a reboot it keeps its files, which a real tmpfs would lose).
Once the pod
is gone from the API and its last process has exited, the kubelet removes its directory
(HandlePodCleanups' cleanupOrphanedPodDirs, and the container GC's
evictPodLogsDirectories for the logs); the lab does so as the pod's worker finishes.

A persistentVolumeClaim volume outlives the pod: the lab stands in a directory per claim,
<state>/volumes/<namespace>/<claim>, for the volume bound to it, so a StatefulSet pod
created again finds what its predecessor wrote there (on any node: volume node affinity
is not modelled). No other volume kind is given a directory.

Containers are local processes without a mount namespace, so a volumeMount cannot appear
at its absolute mountPath: it appears in the container's working directory at the same
path made relative (mountPath /cache -> ./cache, /dev/shm -> ./dev/shm, with subPath the
volume's subdirectory), as a symbolic link to the volume's directory.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from drainsafe.lab.secretfile import private_dir

EMPTY_DIR_PLUGIN = "kubernetes.io~empty-dir"


def pod_dir(state_dir: Path, namespace: str, name: str, uid: str) -> Path:
    """The pod's directory on its node: <state>/pods/<namespace>_<name>_<UID>."""
    return state_dir / "pods" / f"{namespace}_{name}_{uid}"


def claim_dir(state_dir: Path, namespace: str, claim: str) -> Path:
    """The directory standing in for the volume bound to a PersistentVolumeClaim."""
    return state_dir / "volumes" / namespace / claim


@dataclass(frozen=True)
class Mount:
    """A volumeMount as the lab makes it: `link` in the container's working directory
    pointing at `target`, the volume's directory (or a subPath in it)."""

    link: Path
    target: Path


def volume_dirs(pod: Mapping[str, Any], state_dir: Path, here: Path) -> dict[str, Path]:
    """The directory of each volume of the pod that the lab gives one, by volume name;
    `here` is the pod's directory."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    out: dict[str, Path] = {}
    for v in (pod.get("spec") or {}).get("volumes") or []:
        name = str(v.get("name") or "")
        if not name or not _safe_segment(name):
            continue
        if "emptyDir" in v:
            out[name] = here / "volumes" / EMPTY_DIR_PLUGIN / name
        elif isinstance(v.get("persistentVolumeClaim"), dict):
            claim = str(v["persistentVolumeClaim"].get("claimName") or "")
            if _safe_segment(claim):
                out[name] = claim_dir(state_dir, namespace, claim)
    return out


def mounts(container: Mapping[str, Any], volumes: Mapping[str, Path], cwd: Path
           ) -> list[Mount]:
    """The container's volumeMounts of volumes in `volumes`, as links under `cwd`."""
    out = []
    for m in container.get("volumeMounts") or []:
        volume = volumes.get(str(m.get("name") or ""))
        relative = _relative(str(m.get("mountPath") or ""))
        if volume is None or relative is None:
            continue
        target = volume
        sub = _relative(str(m.get("subPath") or ""))
        if sub is not None:
            target = volume / sub
        out.append(Mount(cwd / relative, target))
    return out


def prepare(volumes: Mapping[str, Path], links: list[Mount]) -> None:
    """Make the volumes' directories (0700) and the links to them."""
    for path in volumes.values():
        private_dir(path)
    for m in links:
        m.target.mkdir(parents=True, exist_ok=True)
        m.link.parent.mkdir(parents=True, exist_ok=True)
        if m.link.is_symlink() or m.link.exists():
            continue  # made for an earlier start of the container
        m.link.symlink_to(m.target, target_is_directory=True)


def remove(here: Path) -> None:
    """The pod's directory and all in it (never a claim's volume: a link is not followed)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(here)


def _relative(path: str) -> PurePosixPath | None:
    """`path` without its leading /, or None when it is empty or climbs out ("..")."""
    parts = [p for p in PurePosixPath(path).parts if p not in ("/", ".")]
    if not parts or ".." in parts:
        return None
    return PurePosixPath(*parts)


def _safe_segment(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")
