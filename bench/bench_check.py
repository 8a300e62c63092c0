"""Benchmark: the whole `drainsafe check` command on two corpora, side by side with Checkov.

Generates the corpora (deterministic; bench/out/, not kept in git):
- mixed (bench/out/check-corpus-mixed/): GPU inference Deployments with their Services,
  PDBs and HPAs, a quarter of them naive, written the way people and `helm template` write
  YAML (block and flow style, comments, literal and folded block scalars, `# Source:`
  headers, several documents per file);
- findings-heavy (bench/out/check-corpus-heavy/, issue 31): a fleet of inference services
  (vLLM, SGLang, TGI, Triton by image; gunicorn, uvicorn by command line; a bare Pod, a
  CronJob) where nearly every object has findings and fixes, copied into one namespace per
  copy so the findings grow linearly with the input;
- generated (bench/out/check-corpus/, `--corpus all`): the mixed apps as PyYAML dumps them.

For each, in one run: the whole command as a process (`drainsafe check -o json|sarif|text
DIR`, interpreter start and output to a pipe included; best of --repeat) at --objects
(10,000), and `-o json` once at --scale-objects (100,000) for the per-object cost and the
peak memory; the in-process run; yaml-rs alone (and PyYAML) for reference; Checkov
(`checkov -d DIR --framework kubernetes -o json`), once, at --objects, from its own
virtualenv bench/.venv-checkov (created on first run; never the project's venv: its pins
conflict).

Goals (issue 31): >= 20,000 objects/s for the whole command with json and sarif on both
corpora, text at most twice json, >= 50x Checkov, per-object cost within 1.2x from 10,000
to 100,000 objects. A shared machine moves wall figures by 10-30 %; see docs/check.md for
instruction counts.

    python bench/bench_check.py                       # both corpora, with Checkov (minutes)
    python bench/bench_check.py --skip-checkov --corpus heavy --repeat 1
    python bench/bench_check.py --jobs 1,2,default    # rows per --jobs (default: 1,2)
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
HEAVY = HERE / "out" / "check-corpus-heavy"
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


# The findings-heavy corpus (issue 31): one fleet of inference services, as teams write them,
# copied into a namespace per copy (so every copy's PDBs, Services and HPAs match only its own
# workloads, and the findings grow linearly with the copies). Nearly every object has a
# finding with a fix; several servers known by their image (vLLM, SGLang, TGI, Triton) and
# by their command line (uvicorn, gunicorn); block and flow style, comments, literal block
# scalars, a bare Pod, a CronJob's embedded pod template.

_HEAVY = (
    """\
# Source: vllm/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm-chat
  namespace: {ns}
  labels: {{app: vllm-chat, team: "{team}"}}
  annotations:
    drainsafe.io/max-request-seconds: "120"  # longest generation
spec:
  replicas: 1
  selector: {{matchLabels: {{app: vllm-chat}}}}
  template:
    metadata:
      labels: {{app: vllm-chat}}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          args: ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"]
          ports: [{{containerPort: 8000, name: http}}]
          readinessProbe: {{httpGet: {{path: /health, port: 8000}}}}
          livenessProbe: {{httpGet: {{path: /health, port: 8000}}}}
          resources:
            limits: {{nvidia.com/gpu: 1, memory: 48Gi}}
          volumeMounts: [{{name: dshm, mountPath: /dev/shm}}]
      volumes:
        - name: dshm
          emptyDir: {{medium: Memory}}
""",
    """\
apiVersion: v1
kind: Service
metadata: {{name: vllm-chat, namespace: {ns}}}
spec:
  type: LoadBalancer
  selector: {{app: vllm-chat}}
  ports: [{{port: 80, targetPort: 8000}}]
""",
    """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: vllm-chat
  namespace: {ns}
spec:
  minAvailable: 1  # "keep one up"
  selector:
    matchLabels: {{app: vllm-chat}}
""",
    """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: vllm-chat, namespace: {ns}}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: vllm-chat}}
  minReplicas: 1
  maxReplicas: 4
""",
    """\
# Source: sglang/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: sglang
  namespace: {ns}
spec:
  replicas: 2
  strategy: {{type: Recreate}}
  selector:
    matchLabels:
      app: sglang
  template:
    metadata:
      labels:
        app: sglang
    spec:
      terminationGracePeriodSeconds: 60
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.5-cu126
        command:
        - python3
        - -m
        - sglang.launch_server
        - --model-path
        - Qwen/Qwen2.5-7B-Instruct
        - --port
        - "30000"
        ports:
        - containerPort: 30000
        livenessProbe:
          httpGet:
            path: /health
            port: 30000
        resources:
          limits:
            nvidia.com/gpu: 1
""",
    """\
apiVersion: v1
kind: Service
metadata:
  name: sglang
  namespace: {ns}
spec:
  selector:
    app: sglang
  ports:
  - port: 80
    targetPort: 30000
""",
    """\
# Source: tgi/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tgi
  namespace: {ns}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: tgi}}}}
  template:
    metadata: {{labels: {{app: tgi}}}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
        - name: tgi
          image: ghcr.io/huggingface/text-generation-inference:3.2.1
          args: [--model-id, mistralai/Mistral-7B-v0.3, --graceful-termination-timeout, "120"]
          ports: [{{containerPort: 80}}]
          readinessProbe:
            httpGet: {{path: /health, port: 80}}
            periodSeconds: 10
          resources: {{limits: {{nvidia.com/gpu: 2}}}}
        - name: istio-proxy
          image: docker.io/istio/proxyv2:1.24.0
""",
    """\
apiVersion: v1
kind: Service
metadata: {{name: tgi, namespace: {ns}}}
spec: {{selector: {{app: tgi}}, ports: [{{port: 80}}]}}
""",
    """\
# Source: triton/templates/statefulset.yaml
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: triton
  namespace: {ns}
spec:
  replicas: 2
  serviceName: triton
  selector: {{matchLabels: {{app: triton}}}}
  template:
    metadata:
      labels: {{app: triton}}
    spec:
      containers:
        - name: triton
          image: nvcr.io/nvidia/tritonserver:24.08-py3
          command: ["/bin/sh", "-c"]
          args:
            - |
              aws s3 sync s3://models/{team} /models
              tritonserver --model-repository=/models --exit-timeout-secs=200
          ports: [{{containerPort: 8000}}]
          lifecycle:
            preStop: {{exec: {{command: [sh, -c, "sleep 20"]}}}}
          readinessProbe:
            httpGet: {{path: /v2/health/ready, port: 8000}}
          livenessProbe:
            httpGet: {{path: /v2/health/live, port: 8000}}
          resources:
            limits: {{nvidia.com/gpu: 1}}
""",
    """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: triton, namespace: {ns}}}
spec:
  maxUnavailable: 0
  selector: {{matchLabels: {{app: triton}}}}
""",
    """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: embedder
  namespace: {ns}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app: embeder  # a typo: it selects nothing
""",
    """\
# Source: api/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gateway
  namespace: {ns}
  annotations: {{drainsafe.io/max-request-seconds: "60"}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: gateway}}}}
  template:
    metadata: {{labels: {{app: gateway}}}}
    spec:
      containers:
        - name: api
          image: gcr.io/distroless/python3-debian12
          command: [gunicorn, -k, uvicorn.workers.UvicornWorker, app:app, --graceful-timeout, "20"]
          ports: [{{containerPort: 8080}}]
          lifecycle:
            preStop:
              exec:
                command: ["sh", "-c", "sleep 15"]
          readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 10, failureThreshold: 3}}
""",
    """\
apiVersion: v1
kind: Service
metadata: {{name: gateway, namespace: {ns}}}
spec:
  selector: {{app: gateway}}
  externalTrafficPolicy: Local
  type: NodePort
  ports: [{{port: 80, targetPort: 8080}}]
""",
    """\
apiVersion: v1
kind: Pod
metadata:
  name: debug-uvicorn
  namespace: {ns}
  labels: {{app: debug}}
spec:
  containers:
  - name: app
    image: python:3.12-slim
    command: ["uvicorn", "main:app", "--port", "8000"]
    ports: [{{containerPort: 8000}}]
    lifecycle: {{preStop: {{sleep: {{seconds: 40}}}}}}
""",
    """\
apiVersion: batch/v1
kind: CronJob
metadata: {{name: nightly-eval, namespace: {ns}}}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: eval
            image: vllm/vllm-openai:v0.17.1
            args: [--model, eval-model, --shutdown-timeout, "60"]
            volumeMounts: [{{name: scratch, mountPath: /scratch}}]
          volumes: [{{name: scratch, emptyDir: {{}}}}]
""",
)
HEAVY_PER_COPY = len(_HEAVY)


def heavy_copy(i: int) -> list[str]:
    """One copy of the fleet, in namespace fleet-{i}, as text."""
    fields = {"ns": f"fleet-{i}", "team": f"team-{i % 37}"}
    return [t.format(**fields) for t in _HEAVY]


def generate_heavy(objects: int, directory: Path) -> int:
    """The findings-heavy corpus: copies of the fleet, several documents per file, `---`
    between them (some with a comment after it)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    docs: list[str] = []
    i = 0
    while len(docs) < objects:
        docs.extend(heavy_copy(i))
        i += 1
    docs = docs[:objects]
    for n in range(0, len(docs), OBJECTS_PER_FILE):
        part = docs[n:n + OBJECTS_PER_FILE]
        file = n // OBJECTS_PER_FILE
        separator = ("---\n", "--- # next\n")[file % 2]
        (directory / f"fleet-{file:04d}.yaml").write_text(separator.join(part))
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


def compile_bytecode() -> None:
    """drainsafe's modules compiled to bytecode, as pip leaves an installed package: an
    editable checkout in an environment with PYTHONDONTWRITEBYTECODE (this machine's) would
    otherwise compile every module on every run (~60 ms, not the command's own cost)."""
    import compileall

    import drainsafe

    compileall.compile_dir(Path(drainsafe.__file__).parent, quiet=1)


def run_cli(directory: Path, output: str, jobs: int | None) -> tuple[float, float, float]:
    """The whole command as a user runs it (interpreter start, reading, rules, output to a
    pipe): wall seconds, CPU seconds (its worker processes' too) and peak resident memory
    (MiB) of that one process (the largest of it and its workers)."""
    exe = Path(sys.executable).with_name("drainsafe")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "drainsafe"]
    started = time.perf_counter()
    proc = subprocess.Popen([*command, "check", "--no-config",
                             *([] if jobs is None else ["--jobs", str(jobs)]), "-o", output,
                             str(directory)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    while proc.stdout.read(1 << 20):  # what a pipe's reader does; the output is not kept
        pass
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"drainsafe check -o {output} {directory} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def best_cli(directory: Path, outputs: list[str], jobs: list[int | None], repeat: int
             ) -> dict[tuple[str, int | None], tuple[float, float, float]]:
    """Best of `repeat` whole-command runs of each output with each --jobs, interleaved
    (a shared machine's minutes differ: each figure sees the same minutes)."""
    runs: dict[tuple[str, int | None], list[tuple[float, float, float]]] = {}
    for _ in range(max(1, repeat)):
        for output in outputs:
            for n in jobs:
                runs.setdefault((output, n), []).append(run_cli(directory, output, n))
    return {key: min(found) for key, found in runs.items()}


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


Generator = Callable[[int, Path], int]


def measure(name: str, generator: Generator, directory: Path, args: argparse.Namespace,
            checkov_exe: Path | None) -> None:
    """Time everything on one corpus, at --objects and at --scale-objects, and print it."""
    from rich.console import Console
    from rich.table import Table

    count = generator(args.objects, directory)
    size = sum(p.stat().st_size for p in directory.iterdir()) / 1024 / 1024
    print(f"{name} corpus: {count:,} objects in {len(list(directory.iterdir()))} files "
          f"({size:.1f} MiB) at {directory.relative_to(ROOT)}", flush=True)
    outputs = best_cli(directory, ["json", "sarif", "text"], args.jobs, args.repeat)
    ours, ours_cpu, findings = time_in_process(directory, args.repeat)
    rs = time_reading(directory, args.repeat, _yaml_rs)
    pyyaml = None if args.skip_references else time_reading(directory, 1, _pyyaml)
    checkov = time_checkov(checkov_exe, directory) if checkov_exe is not None else None
    big_dir = directory.with_name(directory.name + "-scale")
    big_count = generator(args.scale_objects, big_dir)
    big_size = sum(p.stat().st_size for p in big_dir.iterdir()) / 1024 / 1024
    bigs = best_cli(big_dir, ["json"], args.jobs, 1)
    shutil.rmtree(big_dir)

    table = Table(title=f"drainsafe check on the {name} corpus")
    for column in ("run", "objects", "wall s", "objects/s", "us/object", "CPU s",
                   "peak MiB", "vs Checkov"):
        table.add_column(column, justify="left" if column == "run" else "right")

    def row(label: str, objects: int, wall: float, cpu: float | None,
            peak: float | None = None) -> None:
        ours = label.startswith("drainsafe") and objects == count
        ratio = f"{checkov[0] / wall:.0f}x" if checkov and ours else "-"
        table.add_row(label, f"{objects:,}", f"{wall:.2f}", f"{objects / wall:,.0f}",
                      f"{wall / objects * 1e6:.1f}", "-" if cpu is None else f"{cpu:.2f}",
                      "-" if peak is None else f"{peak:,.0f}", ratio)

    def flag(n: int | None) -> str:
        return "" if n is None else f" --jobs {n}"

    for (output, n), (wall, cpu, peak) in outputs.items():
        row(f"drainsafe check{flag(n)} -o {output} DIR (whole command, best of {args.repeat})",
            count, wall, cpu, peak)
    for (_, n), big in bigs.items():
        row(f"drainsafe check{flag(n)} -o json DIR, {big_size:.0f} MiB (whole command, once)",
            big_count, *big)
    row(f"drainsafe check in-process (best of {args.repeat})", count, ours, ours_cpu)
    if checkov is not None:
        row(f"checkov {CHECKOV_VERSION} --framework kubernetes (once)", count, *checkov)
    row("reference: yaml-rs loads alone", count, *rs)
    if pyyaml is not None:
        row("reference: PyYAML CSafeLoader load_all alone (once)", count, *pyyaml)
    Console(width=150).print(table)
    print(f"findings: {findings:,} ({findings / count:.2f} per object)")
    for n in args.jobs:
        json_wall, json_cpu = outputs[("json", n)][0], outputs[("json", n)][1]
        big = bigs[("json", n)]
        linear = (big[0] / big_count) / (json_wall / count)
        linear_cpu = (big[1] / big_count) / (json_cpu / count)
        print(f"{flag(n).strip() or 'default jobs'}: per object at {big_count:,} / at "
              f"{count:,}: {linear:.2f}x wall, {linear_cpu:.2f}x CPU (goal <= 1.2); text / "
              f"json: {outputs[('text', n)][0] / json_wall:.2f}x (goal <= 2); peak memory at "
              f"{big_count:,} objects: {big[2]:,.0f} MiB", flush=True)


CORPORA: dict[str, tuple[str, Generator, Path]] = {
    "mixed": ("mixed (block + flow style, comments, block scalars, multi-document)",
              lambda n, d: generate_mixed(n, d), MIXED),
    "heavy": ("findings-heavy (a fleet per namespace, nearly every object with findings)",
              lambda n, d: generate_heavy(n, d), HEAVY),
    "generated": ("generated (block style, as PyYAML dumps it)",
                  lambda n, d: generate(n, d), CORPUS),
}


def _jobs(text: str) -> list[int | None]:
    return [None if n.strip() == "default" else int(n) for n in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--scale-objects", type=int, default=100_000,
                        help="the larger run, for per-object cost and peak memory")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-checkov", action="store_true")
    parser.add_argument("--skip-references", action="store_true",
                        help="no PyYAML reference run (1-2 s per corpus)")
    parser.add_argument("--corpus", choices=["both", "all", *CORPORA], default="both",
                        help="both: mixed and heavy; all: the generated one too")
    parser.add_argument("--jobs", type=_jobs, default=[1, 2],
                        help="the command's --jobs, comma-separated, each a row; 'default': "
                             "the command's own choice (the CPUs less the load) (default: 1,2)")
    args = parser.parse_args()

    print(f"Python {platform.python_version()} at {sys.base_prefix} ({platform.python_compiler()}; "
          "builds differ: Debian's and the official images' use PGO and LTO, pyenv's "
          f"default does not); {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    compile_bytecode()
    exe = None if args.skip_checkov else ensure_checkov()
    names = {"both": ["mixed", "heavy"], "all": ["mixed", "heavy", "generated"]}.get(
        args.corpus, [args.corpus])
    for name in names:
        title, generator, directory = CORPORA[name]
        measure(title, generator, directory, args, exe)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores; other work shares "
          "them); goals (issue 31): >= 20,000 objects/s for the whole command (json, sarif), "
          "text <= 2x json, >= 50x Checkov, per-object cost within 1.2x from 10k to 100k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
