"""Every rule, positive and negative, on manifests written here."""

from __future__ import annotations

import pytest
from check_manifests import (
    SLEEP10,
    check,
    check_text,
    container,
    deployment,
    hpa,
    of,
    pdb,
    rules,
    service,
    to_yaml,
)

from drainsafe.check.context import Context
from drainsafe.check.findings import Severity
from drainsafe.check.load import Loaded, SourceText, parse
from drainsafe.check.model import Index
from drainsafe.check.rules import all_rules
from drainsafe.check.rules.termination import over_budget, serving


def base(**kw: object) -> list[dict[str, object]]:
    return [deployment(grace=60, **kw), service(), pdb()]  # type: ignore[arg-type]


def test_clean_baseline_has_no_findings() -> None:
    assert check(*base()) == []


def test_every_rule_has_text() -> None:
    for rule in all_rules().values():
        assert rule.summary and "Sources:" in rule.explain, rule.id


# grace-budget ---------------------------------------------------------------------------

def vllm(*extra: str, **kw: object) -> dict[str, object]:
    return container(command=["vllm", "serve", "m"], args=["--port", "8000", *extra],
                     pre_stop=SLEEP10, **kw)  # type: ignore[arg-type]


def test_grace_budget_flags_vllm_drain_longer_than_grace() -> None:
    found = of(check(deployment(grace=60, containers=[vllm("--shutdown-timeout", "90")]),
                     service(), pdb()), "grace-budget")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.ERROR
    assert "10s" in f.message and "90s" in f.message and "105s" in f.message
    assert f.budget is not None and f.budget.arithmetic() == "10s + 90s + 5s = 105s > 60s"
    assert "terminationGracePeriodSeconds: 105" in f.fix
    assert f.edits and f.edits[0].value == 105


def test_a_servers_kept_budget_is_for_one_context() -> None:
    """over_budget keeps its answer on the server, for the context it was asked under."""
    loaded = Loaded()
    parse(SourceText("t.yaml", to_yaml(deployment(
        grace=70, containers=[vllm("--shutdown-timeout", "50")]))), loaded)
    index = Index()
    for doc in loaded.documents:
        index.add(doc)
    w = index.workloads[0]
    s = serving(w)[0]
    assert over_budget(w, s, Context()) is None  # 10 + 50 + 5 = 65 <= 70
    found = over_budget(w, s, Context(buffer_seconds=15))  # 75 > 70
    assert found is not None and found[0].buffer == 15
    assert over_budget(w, s, Context()) is None


@pytest.mark.parametrize("args, grace, fires", [
    (["uvicorn", "app:app", "--timeout-graceful-shutdown", "40"], 50, True),
    (["uvicorn", "app:app", "--timeout-graceful-shutdown", "40"], 55, False),
    (["gunicorn", "app:app"], 44, True),           # default graceful-timeout 30
    (["gunicorn", "app:app", "--graceful-timeout=20"], 44, False),
    (["tritonserver", "--model-repository=/m"], 40, True),  # default exit timeout 30
    (["tritonserver", "--exit-timeout-secs", "10"], 40, False),
    (["vllm", "serve", "m", "--shutdown-timeout", "120"], 130, True),
    (["vllm", "serve", "m", "--shutdown-timeout=60"], 80, False),
    (["text-generation-launcher", "--graceful-termination-timeout", "60"], 70, True),
    (["text-generation-launcher"], 100, True),  # default 90: 10 + 90 + 5 > 100
])
def test_grace_budget_reads_server_flags(args: list[str], grace: int, fires: bool) -> None:
    c = container(command=args[:1], args=args[1:], pre_stop=SLEEP10)
    found = of(check(deployment(grace=grace, containers=[c]), service(), pdb()), "grace-budget")
    assert bool(found) is fires


def test_grace_budget_uses_annotation_deadline() -> None:
    d = deployment(grace=60, annotations={"drainsafe.io/shutdown-seconds": "50"})
    assert rules(check(d, service(), pdb())) == {"grace-budget"}
    d = deployment(grace=65, annotations={"drainsafe.io/shutdown-seconds": "50"})
    assert "grace-budget" not in rules(check(d, service(), pdb()))


def test_grace_budget_unbounded_server_uses_longest_request() -> None:
    c = container(command=["uvicorn", "app:app"], pre_stop=SLEEP10)
    found = check(deployment(grace=60, containers=[c]), service(), pdb(),
                  max_request_seconds=90)
    assert "grace-budget" in rules(found)
    assert "grace-budget" not in rules(check(deployment(grace=60, containers=[c]), service(),
                                             pdb()))


# shutdown-deadline-short ----------------------------------------------------------------

def test_shutdown_deadline_short() -> None:
    c = container(command=["hypercorn", "app:app"], pre_stop=SLEEP10)
    found = of(check(deployment(grace=120, containers=[c]), service(), pdb(),
                     max_request_seconds=90), "shutdown-deadline-short")
    assert found and "3s" in found[0].message and "--graceful-timeout=90" in found[0].fix
    c = container(command=["hypercorn", "app:app", "--graceful-timeout", "95"], pre_stop=SLEEP10)
    assert not of(check(deployment(grace=120, containers=[c]), service(), pdb(),
                        max_request_seconds=90), "shutdown-deadline-short")


# grace-default --------------------------------------------------------------------------

def test_grace_default_with_declared_longest_request() -> None:
    d = deployment(annotations={"drainsafe.io/max-request-seconds": "90"})
    found = of(check(d, service(), pdb()), "grace-default")
    assert len(found) == 1 and found[0].severity is Severity.WARNING
    assert "10s + longest request 90s" in found[0].message and "105s" in found[0].message
    assert found[0].edits[0].value == 105


def test_grace_default_unknown_longest_request_says_so() -> None:
    found = of(check(deployment(), service(), pdb()), "grace-default")
    assert len(found) == 1 and found[0].severity is Severity.INFO
    assert "unknown" in found[0].message


def test_grace_default_quiet_when_set_or_short_requests() -> None:
    assert not of(check(*base(), max_request_seconds=90), "grace-default")
    assert not of(check(deployment(), service(), pdb(), max_request_seconds=10), "grace-default")


def test_grace_default_fix_respects_cap() -> None:
    found = of(check(deployment(), service(), pdb(), max_request_seconds=90,
                     max_grace_seconds=60), "grace-default")
    assert found and found[0].edits == ()


# prestop-missing ------------------------------------------------------------------------

def test_prestop_missing() -> None:
    d = deployment(grace=60, containers=[container()])
    found = of(check(d, service(), pdb()), "prestop-missing")
    assert found and "sleep:" in found[0].fix and "seconds: 10" in found[0].fix
    # Not behind a Service: nothing routes to it, so no propagation to wait for.
    assert not of(check(d, pdb()), "prestop-missing")
    # Before 1.30 the fix is an exec sleep.
    old = of(check(d, service(), pdb(), cluster_version=(1, 28)), "prestop-missing")
    assert "exec:" in old[0].fix


def _delay_fixes(d: dict[str, object], **context: object) -> list[str]:
    return [f.fix for f in of(check(d, service(), pdb(), **context), "prestop-missing")]


@pytest.mark.parametrize("d, context", [
    (deployment(grace=60, containers=[container("api")]), {}),
    (deployment(grace=90, containers=[container()]), {}),
    (deployment(grace=62, containers=[container()]), {"propagation_seconds": 8}),  # 70 too
    (deployment(grace=60, containers=[container()]), {"cluster_version": (1, 28)}),
])
def test_a_kept_prestop_missing_fix_is_the_one_made_for_its_container(
        d: dict[str, object], context: dict[str, object]) -> None:
    # prestop-missing keeps its snippets: one kept for another container (name, grace,
    # propagation seconds, cluster version) must not be handed out here.
    from drainsafe.check.rules import termination
    termination._DELAY_FIXES.clear()
    made = _delay_fixes(d, **context)
    termination._DELAY_FIXES.clear()
    other = _delay_fixes(deployment(grace=60, containers=[container()]))
    assert made and other and not set(made) & set(other)
    assert _delay_fixes(d, **context) == made


def test_prestop_missing_accepts_drainsafe_serve_delay() -> None:
    c = container(command=["drainsafe", "serve", "--drain-delay", "10", "--shutdown-timeout",
                           "30", "app:app"])
    assert not of(check(deployment(grace=60, containers=[c]), service(), pdb()),
                  "prestop-missing")


# prestop-exceeds-grace ------------------------------------------------------------------

@pytest.mark.parametrize("hook", [
    {"sleep": {"seconds": 60}},
    {"exec": {"command": ["/bin/sh", "-c", "sleep 60"]}},
])
def test_prestop_exceeds_grace(hook: dict[str, object]) -> None:
    d = deployment(grace=30, containers=[container(pre_stop=hook)])
    found = of(check(d, service(), pdb()), "prestop-exceeds-grace")
    assert found and "60s" in found[0].message and "30s" in found[0].message
    d = deployment(grace=90, containers=[container(pre_stop=hook)])
    assert not of(check(d, service(), pdb()), "prestop-exceeds-grace")


# sleep-action-unsupported ---------------------------------------------------------------

def test_sleep_action_unsupported_before_1_30() -> None:
    assert of(check(*base(), cluster_version=(1, 29)), "sleep-action-unsupported")
    assert not of(check(*base(), cluster_version=(1, 30)), "sleep-action-unsupported")


def test_sleep_zero_needs_1_33() -> None:
    d = deployment(grace=60, containers=[container(pre_stop={"sleep": {"seconds": 0}})])
    assert of(check(d, pdb(), cluster_version=(1, 32)), "sleep-action-unsupported")
    assert not of(check(d, pdb(), cluster_version=(1, 33)), "sleep-action-unsupported")


# exec-sleep-no-shell --------------------------------------------------------------------

def test_exec_sleep_no_shell() -> None:
    hook = {"exec": {"command": ["/bin/sh", "-c", "sleep 10"]}}
    d = deployment(grace=60, containers=[container(image="gcr.io/distroless/python3",
                                                   pre_stop=hook)])
    found = of(check(d, service(), pdb()), "exec-sleep-no-shell")
    assert found and "sleep:" in found[0].fix
    d = deployment(grace=60, containers=[container(image="python:3.12-slim", pre_stop=hook)])
    assert not of(check(d, service(), pdb()), "exec-sleep-no-shell")


# readiness-missing ----------------------------------------------------------------------

def test_readiness_missing() -> None:
    d = deployment(grace=60, containers=[container(pre_stop=SLEEP10, ready_probe=False)])
    assert of(check(d, service(), pdb()), "readiness-missing")
    assert not of(check(*base()), "readiness-missing")
    # A Job that serves nothing needs no readiness.
    job = deployment(kind="Job", replicas=None,
                     containers=[container(port=None, ready_probe=False)])
    assert not of(check(job), "readiness-missing")


# readiness-slow -------------------------------------------------------------------------

def test_readiness_slow_behind_load_balancer() -> None:
    slow = container(pre_stop=SLEEP10, readiness={"httpGet": {"path": "/ready", "port": 8000}})
    d = deployment(grace=60, containers=[slow])
    found = of(check(d, service(type="LoadBalancer"), pdb()), "readiness-slow")
    assert found and "10s x 3 + 1s = 31s" in found[0].message
    assert of(check(d, service(etp="Local", type="NodePort"), pdb()), "readiness-slow")
    # ClusterIP: consumers watch EndpointSlices, not probes.
    assert not of(check(d, service(), pdb()), "readiness-slow")
    # A fast probe fits inside the drain delay.
    assert not of(check(*base(), service("lb", selector={"app": "web"}, type="LoadBalancer")),
                  "readiness-slow")


def _missing_fixes(c: dict[str, object]) -> list[str]:
    d = deployment(grace=60, containers=[c])
    return [f.fix for f in of(check(d, service(), pdb()), "readiness-missing")]


_DRAINSAFE = ["drainsafe", "serve", "--drain-delay", "10", "--shutdown-timeout", "30", "app:app"]


@pytest.mark.parametrize("c", [
    container("api", ready_probe=False),
    container(port=9000, ready_probe=False),
    container(port=True, ready_probe=False),  # type: ignore[arg-type]  # == 1, written true
    container(command=["tritonserver", "--model-repository=/m"], ready_probe=False),
    container(command=[*_DRAINSAFE[:2], "--ready-path", "/ok", *_DRAINSAFE[2:]],
              ready_probe=False),
    container(command=[*_DRAINSAFE[:2], "--admin-port", "9001", *_DRAINSAFE[2:]],
              ready_probe=False),
])
def test_a_kept_readiness_missing_fix_is_the_one_made_for_its_container(
        c: dict[str, object]) -> None:
    # readiness-missing keeps its snippets: one kept for another container (name, port and
    # its type, server, admin port and path) must not be handed out here.
    from drainsafe.check.rules import probes
    probes._READINESS_FIXES.clear()
    made = _missing_fixes(c)
    probes._READINESS_FIXES.clear()
    other = _missing_fixes(container(ready_probe=False))
    other += _missing_fixes(container(port=1, ready_probe=False))
    other += _missing_fixes(container(command=_DRAINSAFE, ready_probe=False))
    other += _missing_fixes(container(command=["vllm", "serve", "m"], ready_probe=False))
    assert made and not set(made) & set(other)
    assert _missing_fixes(c) == made


def _slow_fixes(c: dict[str, object], **context: object) -> list[str]:
    d = deployment(grace=60, containers=[c])
    return [f.fix for f in of(check(d, service(type="LoadBalancer"), pdb(), **context),
                              "readiness-slow")]


_SLOW_PROBE = {"httpGet": {"path": "/ready", "port": 8000}}


@pytest.mark.parametrize("c, context", [
    (container("api", pre_stop=SLEEP10, readiness=_SLOW_PROBE), {}),
    (container(pre_stop={"exec": {"command": ["sleep", "10"]}}, readiness=_SLOW_PROBE), {}),
    (container(pre_stop=SLEEP10, readiness=_SLOW_PROBE), {"propagation_seconds": 8}),
])
def test_a_kept_readiness_slow_fix_is_the_one_made_for_its_container(
        c: dict[str, object], context: dict[str, object]) -> None:
    # readiness-slow keeps its snippets: one kept for another container (name, preStop
    # handler, propagation seconds) must not be handed out here.
    from drainsafe.check.rules import probes
    probes._FAST_FIXES.clear()
    made = _slow_fixes(c, **context)
    probes._FAST_FIXES.clear()
    other = _slow_fixes(container(pre_stop=SLEEP10, readiness=_SLOW_PROBE))
    assert made and other and not set(made) & set(other)
    assert _slow_fixes(c, **context) == made


# liveness-on-readiness ------------------------------------------------------------------

def test_liveness_on_readiness_endpoint_is_a_style_preference() -> None:
    # The kubelet stops liveness probes once a pod terminates (1.21 on): identical probes
    # restart no draining server, and are reported as info, worded as a preference.
    probe = {"httpGet": {"path": "/ready", "port": 8000}}
    d = deployment(grace=60, containers=[container(pre_stop=SLEEP10, liveness=probe,
                                                   readiness=probe)])
    found = of(check(d, service(), pdb()), "liveness-on-readiness")
    assert [f.severity for f in found] == [Severity.INFO], found
    assert "style preference" in found[0].message
    assert "restarts a draining server" not in found[0].message
    d = deployment(grace=60, containers=[container(
        pre_stop=SLEEP10, readiness=probe, liveness={"httpGet": {"path": "/livez", "port": 8000}})])
    assert not of(check(d, service(), pdb()), "liveness-on-readiness")


def test_liveness_on_vllm_health() -> None:
    # vLLM 0.32.0's /health stays 200 while --shutdown-timeout drains (503 only for a dead
    # engine): no warning that liveness restarts it; identical probes are a preference (info),
    # fixed with a TCP check (vLLM has no /live or /livez).
    health = {"httpGet": {"path": "/health", "port": 8000}}
    c = vllm("--shutdown-timeout", "40", image="vllm/vllm-openai:v0.32.0", readiness=health,
             liveness=health)
    for version in ((1, 34), (1, 20)):  # its /health does not fail in the drain: either way
        found = of(check(deployment(grace=60, containers=[c]), service(), pdb(),
                         cluster_version=version), "liveness-on-readiness")
        assert [f.severity for f in found] == [Severity.INFO], found
        assert "draining" not in found[0].message
        assert "tcpSocket" in found[0].fix and "/live" not in found[0].fix
        assert "httpGet: null" in found[0].fix
    c = vllm("--shutdown-timeout", "40", liveness=health,
             readiness={"httpGet": {"path": "/v1/models", "port": 8000}})
    assert not of(check(deployment(grace=60, containers=[c]), service(), pdb()),
                  "liveness-on-readiness")


SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]


@pytest.mark.parametrize("path", ["/health", "/health_generate"])
def test_liveness_on_sglang_health(path: str) -> None:
    # SGLang 0.5.23 answers 503 on /health and /health_generate once SIGTERM starts its
    # shutdown: a kubelet that probes liveness during termination (before 1.21) restarts it
    # mid-drain; from 1.21 the kubelet stops liveness first, and nothing is reported.
    c = container(command=SGLANG, pre_stop=SLEEP10,
                  liveness={"httpGet": {"path": path, "port": 8000}},
                  readiness={"httpGet": {"path": "/v1/models", "port": 8000}})
    d = deployment(grace=120, containers=[c])
    found = of(check(d, service(), pdb(), cluster_version=(1, 20)), "liveness-on-readiness")
    assert [f.severity for f in found] == [Severity.WARNING], found
    assert f"sglang fails {path} while it drains" in found[0].message
    assert not of(check(d, service(), pdb(), cluster_version=(1, 21)), "liveness-on-readiness")


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready"])
def test_liveness_on_triton_health(path: str) -> None:
    # Triton answers UNAVAILABLE ("Server exiting") on both health routes while it exits.
    c = container(command=["tritonserver", "--model-repository=/m"], pre_stop=SLEEP10,
                  liveness={"httpGet": {"path": path, "port": 8000}},
                  readiness={"httpGet": {"path": "/v2/models/m/ready", "port": 8000}})
    d = deployment(grace=120, containers=[c])
    found = of(check(d, service(), pdb(), cluster_version=(1, 19)), "liveness-on-readiness")
    assert [f.severity for f in found] == [Severity.WARNING], found
    assert f"triton fails {path} while it drains" in found[0].message
    assert not of(check(d, service(), pdb()), "liveness-on-readiness")


def test_liveness_on_tgi_health_claims_no_drain_fact() -> None:
    # TGI's /health during the drain was not read at a release: no warning is claimed.
    health = {"httpGet": {"path": "/health", "port": 80}}
    c = container(image="ghcr.io/huggingface/text-generation-inference:3.3.6",
                  args=["--model-id", "m"], pre_stop=SLEEP10, liveness=health,
                  readiness={"httpGet": {"path": "/info", "port": 80}})
    assert not of(check(deployment(grace=120, containers=[c]), service(), pdb(),
                        cluster_version=(1, 19)), "liveness-on-readiness")


# signal-not-forwarded -------------------------------------------------------------------

@pytest.mark.parametrize("script, fires", [
    ("pip install x; python -m uvicorn app:app", True),
    ("download-model && vllm serve m", True),
    ("vllm serve m &\nwait", True),
    ("download-model && exec vllm serve m", False),
    ("exec uvicorn app:app", False),
    ("uvicorn app:app", False),  # a single command is exec'd by the shell
])
def test_signal_not_forwarded(script: str, fires: bool) -> None:
    c = container(command=["/bin/sh", "-c"], args=[script], pre_stop=SLEEP10)
    found = of(check(deployment(grace=60, containers=[c]), service(), pdb()),
               "signal-not-forwarded")
    assert bool(found) is fires


# server-aborts-on-sigterm ---------------------------------------------------------------

def test_server_aborts_on_sigterm() -> None:
    found = of(check(deployment(grace=60, containers=[vllm()]), service(), pdb()),
               "server-aborts-on-sigterm")
    assert found and "--shutdown-timeout=45" in found[0].fix  # 60 - 10 - 5
    assert not of(check(deployment(grace=60, containers=[vllm("--shutdown-timeout", "40")]),
                        service(), pdb()), "server-aborts-on-sigterm")
    # Not a vLLM flag at any release read: the server still aborts.
    assert of(check(deployment(grace=60, containers=[vllm("--shutdown-mode", "drain")]),
                    service(), pdb()), "server-aborts-on-sigterm")


# pdb-missing ----------------------------------------------------------------------------

def test_pdb_missing() -> None:
    found = of(check(deployment(grace=60), service()), "pdb-missing")
    assert found and "maxUnavailable: 1" in found[0].fix and "app: web" in found[0].fix
    assert of(check(deployment(grace=60, replicas=1), hpa(min_replicas=1), service()),
              "pdb-missing")
    assert not of(check(deployment(grace=60, replicas=1), service()), "pdb-missing")
    assert not of(check(*base()), "pdb-missing")


# pdb-wedge ------------------------------------------------------------------------------

@pytest.mark.parametrize("replicas, budget, fires", [
    (2, {"min_available": 2}, True),
    (3, {"min_available": 2}, False),
    (2, {"min_available": "100%"}, True),
    (4, {"min_available": "80%"}, True),   # ceil(3.2) = 4
    (5, {"min_available": "80%"}, False),
    (2, {"max_unavailable": 0}, True),
    (5, {"max_unavailable": "0%"}, True),
    (2, {"max_unavailable": "10%"}, False),  # rounds up to 1
])
def test_pdb_wedge(replicas: int, budget: dict[str, object], fires: bool) -> None:
    found = of(check(deployment(grace=60, replicas=replicas), service(),
                     pdb(**budget)), "pdb-wedge")  # type: ignore[arg-type]
    assert bool(found) is fires


def test_pdb_wedge_uses_hpa_minimum() -> None:
    # replicas 5 would allow evictions, but the HPA may scale down to 2.
    objs = [deployment(grace=60, replicas=5), hpa(min_replicas=2), service(),
            pdb(min_available=2)]
    found = of(check(*objs), "pdb-wedge")
    assert found and "HPA web minReplicas 2" in found[0].message
    objs[1] = hpa(min_replicas=3)
    assert not of(check(*objs), "pdb-wedge")


def test_pdb_wedge_sums_workloads() -> None:
    a = deployment("a", grace=60, replicas=1, labels={"app": "a", "tier": "llm"})
    b = deployment("b", grace=60, replicas=1, labels={"app": "b", "tier": "llm"})
    assert not of(check(a, b, pdb("llm", min_available=1, selector={"tier": "llm"})),
                  "pdb-wedge")
    assert of(check(a, b, pdb("llm", min_available=2, selector={"tier": "llm"})), "pdb-wedge")


# pdb-overlap ----------------------------------------------------------------------------

def test_pdb_overlap() -> None:
    found = of(check(*base(), pdb("second", selector={"app": "web"})), "pdb-overlap")
    assert found and "web, second" in found[0].message and "500" in found[0].message
    assert not of(check(*base(), pdb("other", selector={"app": "other"})), "pdb-overlap")
    # Same labels in another namespace do not overlap.
    assert not of(check(*base(), pdb("second", selector={"app": "web"}, namespace="prod")),
                  "pdb-overlap")


# pdb-selects-nothing --------------------------------------------------------------------

def test_pdb_selects_nothing() -> None:
    found = of(check(*base(), pdb("typo", selector={"app": "wbe"})), "pdb-selects-nothing")
    assert found and found[0].object.name == "typo"
    assert not of(check(*base()), "pdb-selects-nothing")
    # A PDB checked on its own: its pods may be in another file.
    assert not of(check(pdb("typo", selector={"app": "wbe"})), "pdb-selects-nothing")


# pdb-prefer-max-unavailable -------------------------------------------------------------

def test_pdb_prefer_max_unavailable() -> None:
    found = of(check(deployment(grace=60, replicas=3), service(), pdb(min_available=2)),
               "pdb-prefer-max-unavailable")
    assert found and found[0].severity is Severity.INFO
    assert not of(check(deployment(grace=60, replicas=10), service(), pdb(min_available=8)),
                  "pdb-prefer-max-unavailable")
    assert not of(check(*base()), "pdb-prefer-max-unavailable")


# single-replica -------------------------------------------------------------------------

def test_single_replica() -> None:
    assert of(check(deployment(grace=60, replicas=1), service()), "single-replica")
    assert of(check(deployment(grace=60, replicas=None), service()), "single-replica")
    found = of(check(deployment(grace=60, replicas=1), hpa(min_replicas=1), service()),
               "single-replica")
    assert found and found[0].object.kind == "HorizontalPodAutoscaler"
    assert not of(check(deployment(grace=60, replicas=1), hpa(min_replicas=2), service(),
                        pdb()), "single-replica")
    assert not of(check(*base()), "single-replica")


# rollout-unavailable --------------------------------------------------------------------

def test_rollout_recreate() -> None:
    found = of(check(deployment(grace=60, strategy={"type": "Recreate"}), service(), pdb()),
               "rollout-unavailable")
    assert found and "Recreate" in found[0].message


def test_rollout_below_pdb() -> None:
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 2}}
    found = of(check(deployment(grace=60, replicas=4, strategy=rolling), service(),
                     pdb(min_available=3)), "rollout-unavailable")
    assert found and "2 of 4" in found[0].message
    rolling["rollingUpdate"]["maxUnavailable"] = 1  # type: ignore[index]
    assert not of(check(deployment(grace=60, replicas=4, strategy=rolling), service(),
                        pdb(min_available=3)), "rollout-unavailable")


# sidecar-ordering -----------------------------------------------------------------------

def test_sidecar_ordering() -> None:
    proxy = container("istio-proxy", image="docker.io/istio/proxyv2:1.22", port=15090,
                      ready_probe=False)
    d = deployment(grace=60, containers=[container(pre_stop=SLEEP10), proxy])
    found = of(check(d, service(), pdb()), "sidecar-ordering")
    assert found and "restartPolicy: Always" in found[0].fix
    old = of(check(d, service(), pdb(), cluster_version=(1, 28)), "sidecar-ordering")
    assert old and "EXIT_ON_ZERO_ACTIVE_CONNECTIONS" in old[0].fix
    native = dict(proxy, restartPolicy="Always")
    d = deployment(grace=60, containers=[container(pre_stop=SLEEP10)], init_containers=[native])
    assert not of(check(d, service(), pdb()), "sidecar-ordering")


# gpu-surge ------------------------------------------------------------------------------

def test_gpu_surge() -> None:
    gpu = container(pre_stop=SLEEP10, gpus=1)
    found = of(check(deployment(grace=60, containers=[gpu]), service(), pdb()), "gpu-surge")
    assert found and "nvidia.com/gpu" in found[0].message and "maxSurge: 0" in found[0].fix
    no_surge = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert not of(check(deployment(grace=60, containers=[gpu], strategy=no_surge), service(),
                        pdb()), "gpu-surge")
    assert not of(check(*base()), "gpu-surge")


# emptydir-data --------------------------------------------------------------------------

def test_emptydir_data() -> None:
    d = deployment(grace=60, volumes=[{"name": "cache", "emptyDir": {}}])
    found = of(check(d, service(), pdb()), "emptydir-data")
    assert found and found[0].severity is Severity.INFO and "cache" in found[0].message
    assert not of(check(*base()), "emptydir-data")


# unmanaged-pod --------------------------------------------------------------------------

def test_unmanaged_pod() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"terminationGracePeriodSeconds": 60,
                    "containers": [container(pre_stop=SLEEP10)]}}
    assert of(check(pod), "unmanaged-pod")
    owned = dict(pod, metadata={"name": "p", "ownerReferences": [{"kind": "ReplicaSet"}]})
    assert not of(check(owned), "unmanaged-pod")


# grace-exceeds-cap ----------------------------------------------------------------------

def test_grace_exceeds_cap() -> None:
    d = deployment(grace=900)
    found = of(check(d, service(), pdb(), max_grace_seconds=600), "grace-exceeds-cap")
    assert found and "900s" in found[0].message and "600s" in found[0].message
    assert not of(check(d, service(), pdb()), "grace-exceeds-cap")
    assert not of(check(*base(), max_grace_seconds=600), "grace-exceeds-cap")


# pdb-invalid ----------------------------------------------------------------------------

def test_pdb_invalid() -> None:
    bad = pdb()
    bad["spec"]["minAvailable"] = 1  # type: ignore[index]
    assert of(check(deployment(grace=60), service(), bad), "pdb-invalid")
    assert not of(check(*base()), "pdb-invalid")


# ignore annotation ----------------------------------------------------------------------

def test_ignore_annotation_on_object_and_template() -> None:
    d = deployment(grace=60, replicas=1, annotations={"drainsafe.io/ignore": "single-replica"})
    assert not of(check(d, service()), "single-replica")
    d = deployment(grace=60, replicas=1)
    d["spec"]["template"]["metadata"]["annotations"] = {  # type: ignore[index]
        "drainsafe.io/ignore": "pdb-missing, single-replica"}
    assert not of(check(d, service()), "single-replica")


def test_ignore_annotation_key_spelled_with_escapes() -> None:
    """The key written with a YAML escape is still the annotation (the engine skips its
    ignore lookups only for inputs that can hold no such key)."""
    text = to_yaml(deployment(grace=60, replicas=1), service()).replace(
        "metadata:\n  name: web\n", "metadata:\n  name: web\n  annotations:\n"
        '    "drainsafe.io\\u002fignore": single-replica\n', 1)
    assert "drainsafe.io/ignore" not in text and "u002f" in text
    assert not of(check_text(text), "single-replica")
    assert of(check_text(text.replace("u002f", "u002e")), "single-replica")


# pod templates inside other kinds -------------------------------------------------------

def test_embedded_pod_templates_get_container_rules() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [container(port=None, ready_probe=False, command=["sh", "-c"],
                                         args=["prepare; python job.py"])]}}}}}}
    found = check(cron)
    assert rules(found) == {"signal-not-forwarded"}  # a batch pod needs no readiness
    assert found[0].object.name == "nightly (spec.jobTemplate.spec.template.spec)"
    ray = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "llm"},
           "spec": {"workerGroupSpecs": [{"template": {"spec": {"containers": [
               container(ready_probe=False, command=["vllm", "serve", "m"])]}}}]}}
    assert {"readiness-missing", "server-aborts-on-sigterm"} <= rules(check(ray))


def test_lines_point_at_the_field() -> None:
    from check_manifests import check_text, to_yaml

    text = to_yaml(
        deployment(grace=20, containers=[container(pre_stop={"sleep": {"seconds": 30}})]),
        pdb(max_unavailable=0))
    lines = text.splitlines()
    found = check_text(text)
    exceeds = of(found, "prestop-exceeds-grace")[0]
    assert lines[exceeds.line - 1].strip() == "seconds: 30"
    wedge = of(found, "pdb-wedge")[0]
    assert lines[wedge.line - 1].strip() == "maxUnavailable: 0"


# pdb-upgrade-slow -----------------------------------------------------------------------

def _fleet(replicas: int, startup: str | None, **pdb_kw: object) -> list[dict[str, object]]:
    annotations = {"drainsafe.io/startup-seconds": startup} if startup else None
    return [deployment(grace=60, replicas=replicas, annotations=annotations), service(),
            pdb(**pdb_kw)]  # type: ignore[arg-type]


def test_pdb_upgrade_slow() -> None:
    found = of(check(*_fleet(300, "600")), "pdb-upgrade-slow")
    # 300 pods, one at a time, 600 s each: 300 x 600 s = 50 h; 25 at a time: 12 x 600 s = 2 h.
    assert found and "300 x 600s = 50.0 h" in found[0].message
    assert "maxUnavailable: 25" in found[0].fix
    assert not of(check(*_fleet(300, "600", max_unavailable="10%")), "pdb-upgrade-slow")
    assert not of(check(*_fleet(20, "600")), "pdb-upgrade-slow")      # 20 x 600 s = 3.3 h
    assert not of(check(*_fleet(300, None)), "pdb-upgrade-slow")      # start-up unknown
    found = of(check(*_fleet(300, "600", min_available=299)), "pdb-upgrade-slow")
    assert found and "minAvailable: null" in found[0].fix


def test_pdb_upgrade_slow_reads_probe_delays() -> None:
    c = container(pre_stop=SLEEP10, readiness={"httpGet": {"path": "/ready", "port": 8000},
                                               "initialDelaySeconds": 300})
    objs = [deployment(grace=60, replicas=100, containers=[c]), service(), pdb()]
    found = of(check(*objs), "pdb-upgrade-slow")
    assert found and "100 x 300s = 8.3 h" in found[0].message
