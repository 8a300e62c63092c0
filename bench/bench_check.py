"""Benchmark: drainsafe check objects/s on two corpora, side by side with Checkov.

Generates two corpora of Kubernetes objects (GPU inference Deployments with their Services,
PDBs and HPAs; a quarter of them with drain-safety problems): bench/out/check-corpus/, as
PyYAML dumps it (block style), and bench/out/check-corpus-mixed/, written the way people and
`helm template` write YAML (block and flow style mixed, comments, literal and folded block
scalars, `# Source:` headers, several documents per file). For each, it times in the same
run:
- drainsafe check in-process (read + parse + index + all rules + line numbers), best of 5;
- drainsafe check as a CLI process (`drainsafe check -o json DIR`), once;
- for reference, the two YAML readers alone (PyYAML's libyaml loader, yaml-rs);
- Checkov (`checkov -d DIR --framework kubernetes -o json`), once, from its own virtualenv
  bench/.venv-checkov (created on first run; never the project's venv: its pins conflict).

Goals: >= 20,000 objects/s in-process and >= 50x Checkov, on the mixed corpus too (issue 16;
issue 2 set them for the generated one). Each row shows wall-clock and CPU
seconds (CPU of the child process for the CLI and Checkov); a shared machine makes wall
figures indicative, CPU figures less so.

    python bench/bench_check.py                 # 10,000 objects each (minutes with Checkov)
    python bench/bench_check.py --objects 50000 --skip-checkov --corpus mixed
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "out" / "check-corpus"
MIXED = HERE / "out" / "check-corpus-mixed"
CHECKOV_VENV = HERE / ".venv-checkov"
CHECKOV_VERSION = "3.3.30"
OBJECTS_PER_FILE = 200


def app_objects(i: int) -> list[dict[str, Any]]:
    """Four objects for one app; every fourth app has the usual drain-safety problems."""
    name, ns = f"llm-{i}", f"team-{i % 50}"
    naive = i % 4 == 0
    labels = {"app": name}
    container: dict[str, object] = {
        "name": "vllm", "image": "vllm/vllm-openai:v0.18.0",  # has --shutdown-timeout
        "command": ["vllm", "serve", f"model-{i % 7}"],
        "args": ["--port", "8000"] + ([] if naive else ["--shutdown-timeout", "100"]),
        "ports": [{"containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 2,
                           "failureThreshold": 1},
        "livenessProbe": {"httpGet": {"path": "/health" if naive else "/live", "port": 8000}},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    if not naive:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": 10}}}
    pod: dict[str, object] = {"containers": [container],
                              "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}
    if not naive:
        pod["terminationGracePeriodSeconds"] = 120
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"drainsafe.io/max-request-seconds": "90"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": 1 if naive else 0,
                                                "maxUnavailable": 1}},
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8000}]}}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name, "namespace": ns},
           "spec": ({"minAvailable": 3} if naive else {"maxUnavailable": 1})
           | {"selector": {"matchLabels": labels}}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": name},
                    "minReplicas": 3, "maxReplicas": 8}}
    return [deployment, service, pdb, hpa]


# The mixed corpus: YAML as people and `helm template` write it, in the usual mix of styles.
# Block style with flow collections inside (`selector: {matchLabels: {app: x}}`, `args:
# ["--port", "8000"]`), comments on their own lines and after values, quoted and plain
# scalars, literal and folded block scalars (scripts, descriptions), `# Source:` headers and
# `---` between documents as helm template prints them, sequences indented under their key
# or not.

_MIXED_DEPLOYMENT = """\
# Source: {chart}/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: {name}, app.kubernetes.io/managed-by: Helm, tier: "gpu"}}
  annotations:
    drainsafe.io/max-request-seconds: "90"  # longest generation
    description: >-
      {name} serves model-{model}
      behind the team gateway.
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  strategy:
    type: RollingUpdate
    rollingUpdate: {{maxSurge: {surge}, maxUnavailable: 1}}
  template:
    metadata:
      labels:
        app: {name}
    spec:
{grace}      containers:
        - name: vllm
          image: "vllm/vllm-openai:v0.18.0"
{command}
          ports:
            - {{containerPort: 8000, name: http, protocol: TCP}}
          readinessProbe:
            httpGet: {{path: /health, port: http}}
            periodSeconds: 2
            failureThreshold: 1
{lifecycle}          resources:
            limits: {{nvidia.com/gpu: 1, memory: 64Gi}}
          volumeMounts:
          - name: dshm
            mountPath: /dev/shm
      volumes:
      - name: dshm
        emptyDir: {{medium: Memory}}
"""

_MIXED_SERVICE = """\
# Source: {chart}/templates/service.yaml
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  type: ClusterIP
  selector:
    app: {name}
  ports: [{{port: 80, targetPort: 8000, name: http}}]
"""

_MIXED_PDB = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {name}
  namespace: {ns}
spec:
  {budget}
  selector:
    matchLabels: {{app: {name}}}
"""

_MIXED_HPA = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {name}
  namespace: {ns}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  minReplicas: 3
  maxReplicas: 8
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {{type: Utilization, averageUtilization: 80}}
"""


def mixed_app(i: int) -> list[str]:
    """Four documents for one app, as text; every fourth app has the usual problems."""
    naive = i % 4 == 0
    if i % 3 == 0:  # a script, as a literal block scalar
        command = ('          command: ["/bin/sh", "-c"]\n          args:\n            - |\n'
                   '              echo "starting model-{model}"\n'
                   '              exec vllm serve model-{model} --port 8000{flag}')
    else:
        command = '          args: ["--model", "model-{model}", "--port", "8000"{flag}]'
    fields = {
        "chart": f"llm-{i % 13}", "name": f"llm-{i}", "ns": f"team-{i % 50}",
        "replicas": 3, "surge": 1 if naive else 0, "model": i % 7,
        "grace": "" if naive else "      terminationGracePeriodSeconds: 120\n",
        "flag": "" if naive else (" --shutdown-timeout=100" if i % 3 == 0
                                  else ', "--shutdown-timeout=100"'),
        "lifecycle": "" if naive else
        "          lifecycle:\n            preStop: {sleep: {seconds: 10}}  # propagation\n",
        "budget": "minAvailable: 3" if naive else "maxUnavailable: 1",
    }
    fields["command"] = command.format(**fields)
    return [t.format(**fields) for t in (_MIXED_DEPLOYMENT, _MIXED_SERVICE, _MIXED_PDB,
                                         _MIXED_HPA)]


def generate_mixed(objects: int, directory: Path) -> int:
    """The mixed corpus: files of several apps, documents separated by `---` (with a
    comment after it, or a blank line before it, in some files)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    docs: list[str] = []
    i = 0
    while len(docs) < objects:
        docs.extend(mixed_app(i))
        i += 1
    docs = docs[:objects]
    for n in range(0, len(docs), OBJECTS_PER_FILE):
        part = docs[n:n + OBJECTS_PER_FILE]
        file = n // OBJECTS_PER_FILE
        separator = ("---\n", "--- # next\n", "\n---\n")[file % 3]
        text = separator.join(part)
        if file % 5 == 0:
            text = "---\n" + text
        (directory / f"mixed-{file:04d}.yaml").write_text(text)
    return len(docs)


def generate(objects: int, directory: Path) -> int:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    docs: list[dict[str, Any]] = []
    i = 0
    while len(docs) < objects:
        docs.extend(app_objects(i))
        i += 1
    docs = docs[:objects]
    for n in range(0, len(docs), OBJECTS_PER_FILE):
        text = yaml.safe_dump_all(docs[n:n + OBJECTS_PER_FILE], sort_keys=False)
        (directory / f"apps-{n // OBJECTS_PER_FILE:04d}.yaml").write_text(text)
    return len(docs)


def time_in_process(directory: Path, repeat: int) -> tuple[float, float, int]:
    """Best wall and CPU seconds of `repeat` in-process runs, and the findings count."""
    from drainsafe.check.context import Context
    from drainsafe.check.engine import run

    best, best_cpu, findings = float("inf"), float("inf"), 0
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        result = run([str(directory)], Context())
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        findings = len(result.findings)
        assert not result.errors, result.errors[:3]
        del result  # freeing one run's objects is not part of the next run's time
    return best, best_cpu, findings


def time_reading(directory: Path, repeat: int, read: Callable[[str], object]
                 ) -> tuple[float, float]:
    """Best wall and CPU seconds of `read` over every file of the corpus (texts in memory)."""
    texts = [p.read_text() for p in sorted(directory.iterdir())]
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        for text in texts:
            read(text)
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best, best_cpu


def _pyyaml(text: str) -> object:
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


def _yaml_rs(text: str) -> object:
    import yaml_rs

    return yaml_rs.loads(text, parse_datetime=False)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_cli(directory: Path) -> tuple[float, float]:
    """Wall and CPU seconds of the CLI as a process (interpreter start and JSON output
    included)."""
    exe = Path(sys.executable).with_name("drainsafe")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "drainsafe"]
    started, cpu = time.perf_counter(), _children_cpu()
    subprocess.run([*command, "check", "--no-config", "-o", "json", str(directory)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started, _children_cpu() - cpu


def _interpreter(python: Path | str) -> str:
    """Which build of Python `python` runs on (its base installation and version)."""
    return subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix, sys.version)"],
                          capture_output=True, text=True, check=False).stdout.strip()


def ensure_checkov() -> Path | None:
    """Checkov in its own venv, made from the interpreter drainsafe runs on (a faster build
    for one of the two would skew the ratio)."""
    exe = CHECKOV_VENV / "bin" / "checkov"
    python = CHECKOV_VENV / "bin" / "python"
    if exe.exists() and _interpreter(python) == _interpreter(sys.executable):
        return exe
    print(f"creating {CHECKOV_VENV} with checkov=={CHECKOV_VERSION} (first run only)...",
          flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(CHECKOV_VENV)], check=True)
        subprocess.run([str(CHECKOV_VENV / "bin" / "pip"), "install", "-q",
                        f"checkov=={CHECKOV_VERSION}"], check=True, timeout=1200,
                       capture_output=True, text=True)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        print(f"checkov could not be installed: {exc} {detail[-500:]}")
        return None
    return exe if exe.exists() else None


def time_checkov(exe: Path, directory: Path) -> tuple[float, float] | None:
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE", CHECKOV_RUN_SCA_PACKAGE_SCAN_V2="false",
               LOG_LEVEL="ERROR")
    started, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(
        [str(exe), "-d", str(directory), "--framework", "kubernetes", "-o", "json",
         "--quiet", "--compact", "--skip-download", "--soft-fail"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False, timeout=3600)
    elapsed, used = time.perf_counter() - started, _children_cpu() - cpu
    if proc.returncode not in (0, 1):
        print(f"checkov failed ({proc.returncode}): {proc.stderr[-500:]!r}")
        return None
    return elapsed, used


def measure(name: str, directory: Path, count: int, args: argparse.Namespace,
            checkov_exe: Path | None) -> None:
    """Time everything on one corpus and print its table."""
    from rich.console import Console
    from rich.table import Table

    size = sum(p.stat().st_size for p in directory.iterdir()) / 1024 / 1024
    print(f"{name} corpus: {count:,} objects in {len(list(directory.iterdir()))} files "
          f"({size:.1f} MiB) at {directory.relative_to(ROOT)}")
    ours, ours_cpu, findings = time_in_process(directory, args.repeat)
    pyyaml = time_reading(directory, args.repeat, _pyyaml)
    rs = time_reading(directory, args.repeat, _yaml_rs)
    cli = time_cli(directory)
    checkov = time_checkov(checkov_exe, directory) if checkov_exe is not None else None

    table = Table(title=f"drainsafe check vs Checkov on the {name} corpus ({count:,} objects)")
    table.add_column("tool")
    table.add_column("wall s", justify="right")
    table.add_column("wall objects/s", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("CPU objects/s", justify="right")
    table.add_column("vs Checkov (wall)", justify="right")

    def row(label: str, seconds: tuple[float, float] | None) -> None:
        if seconds is None:
            table.add_row(label, "-", "-", "-", "-", "-")
            return
        wall, cpu = seconds
        ratio = f"{checkov[0] / wall:.0f}x" if checkov else "-"
        table.add_row(label, f"{wall:.2f}", f"{count / wall:,.0f}", f"{cpu:.2f}",
                      f"{count / cpu:,.0f}" if cpu > 0 else "-", ratio)

    row(f"drainsafe check (in-process, best of {args.repeat})", (ours, ours_cpu))
    row("drainsafe check -o json (CLI process, once)", cli)
    row(f"checkov {CHECKOV_VERSION} --framework kubernetes (once)", checkov)
    row("reference: PyYAML CSafeLoader load_all alone", pyyaml)
    row("reference: yaml-rs loads alone", rs)
    Console(width=130).print(table)
    print(f"drainsafe findings: {findings:,}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-checkov", action="store_true")
    parser.add_argument("--corpus", choices=["both", "generated", "mixed"], default="both")
    args = parser.parse_args()

    print(f"Python {platform.python_version()} at {sys.base_prefix} ({platform.python_compiler()}; "
          "builds differ: Debian's and the official images' use PGO and LTO, pyenv's "
          "default does not)")
    exe = None if args.skip_checkov else ensure_checkov()
    if args.corpus in ("both", "generated"):
        measure("generated (block style)", CORPUS, generate(args.objects, CORPUS), args, exe)
    if args.corpus in ("both", "mixed"):
        measure("mixed (block + flow style, comments, block scalars, multi-document)", MIXED,
                generate_mixed(args.objects, MIXED), args, exe)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores; other work shares "
          "them); goals (issue 16): >= 20,000 objects/s in-process and >= 50x Checkov on "
          "the mixed corpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
