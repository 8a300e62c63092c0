"""Termination rules: the grace-period budget, the drain delay and the signal path."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from drainsafe.budget import Budget, fit_deadline, recommended_grace
from drainsafe.check.context import MAX_REQUEST_ANNOTATION, SHUTDOWN_ANNOTATION, Context
from drainsafe.check.findings import SECONDS, Edit, Finding, Path, Severity
from drainsafe.check.hooks import DrainDelay, drain_delay, needs_shell
from drainsafe.check.model import Container, Index, Workload, mapping, sequence
from drainsafe.check.rules.registry import rule
from drainsafe.check.serverfix import (
    PROBE_HANDLERS,
    WRAPPER_NOTE,
    pre_stop,
    with_flag,
    wrapped,
)
from drainsafe.check.servers import (
    CommandLine,
    ServerShutdown,
    identify,
    sets_flag,
    signal_forwarded,
)
from drainsafe.check.snippets import container_fix, dump, pod_fix

SIDECAR_MARKERS = ("istio-proxy", "proxyv2", "envoy", "linkerd-proxy", "linkerd2-proxy",
                   "cloud-sql-proxy", "cloudsql-proxy", "oauth2-proxy", "sidecar",
                   "fluent-bit", "fluentd", "otel-collector", "opentelemetry-collector")
SHELL_LESS_MARKERS = ("distroless", "scratch", "chainguard/static", "/static:", "-static:",
                      "-static@", "/static@")


_SIDECAR = re.compile("|".join(re.escape(marker) for marker in SIDECAR_MARKERS))


def is_sidecar(c: Container) -> bool:
    return _sidecar(c.name, c.image)


@lru_cache(maxsize=4096)  # a chart's replicas repeat their container names and images
def _sidecar(name: str, image: str) -> bool:
    return _SIDECAR.search(f"{name} {image}".lower()) is not None


def shell_less(image: str) -> bool:
    text = image.lower()
    return any(marker in text for marker in SHELL_LESS_MARKERS) or text.endswith("/static")


@dataclass(slots=True)
class Serving:
    """One serving container with what check knows about its shutdown. Not changed once
    made (but for the budget kept below); a class with slots, not a named tuple: rules
    read its fields in every loop, and CPython 3.11 reads a slot directly where a named
    tuple's field is a descriptor call."""

    container: Container
    line: CommandLine | None
    server: ServerShutdown | None
    delay: DrainDelay
    budget: tuple[Context, tuple[Budget, str] | None] | None = None
    """over_budget's answer and the context it was for: grace-budget asks for every
    server, grace-default again for every workload whose grace is unset."""


def serving(w: Workload) -> list[Serving]:
    """The containers that serve requests (sidecars excluded, unless nothing else is left)."""
    cached: list[Serving] | None = w.serving
    if cached is not None:
        return cached
    main = containers = w.containers
    if len(containers) > 1:  # a lone container serves, whether or not it looks like a sidecar
        main = [c for c in containers if not is_sidecar(c)] or containers
    result = []
    for c in main:
        line = c.command_line
        server = identify(line)
        result.append(Serving(c, line, server, drain_delay(c, server)))
    w.serving = result  # several rules ask; the command lines parse once
    return result


def serves_traffic(index: Index, w: Workload) -> bool:
    """Behind a Service, or declaring ports (batch kinds never count)."""
    if w.ref.kind in ("Job", "CronJob"):
        return False
    if index.services_for(w):
        return True
    # any() of a list, not of a generator: a generator left early (most serving containers
    # declare ports) is closed by raising GeneratorExit in it, ~2,000 instructions; a
    # pod's few containers cost less to ask all.
    return any([c.spec.get("ports") for c in w.containers])


def max_request(w: Workload, context: Context) -> tuple[float | None, str]:
    if context.max_request_seconds is not None:
        return context.max_request_seconds, "--max-request-seconds"
    value = w.annotation_number(MAX_REQUEST_ANNOTATION)
    if value is not None and value >= 0:
        return value, MAX_REQUEST_ANNOTATION
    return None, ""


def shutdown_deadline(w: Workload, s: Serving, context: Context) -> tuple[float | None, str]:
    """The server's shutdown deadline and where it comes from (None: unknown)."""
    value = w.annotation_number(SHUTDOWN_ANNOTATION)
    if value is not None and value >= 0:
        return value, SHUTDOWN_ANNOTATION
    if s.server is not None and not s.server.drains:
        return None, ""  # server-aborts-on-sigterm reports it
    if s.server is not None and s.server.deadline is not None:
        return s.server.deadline, f"{s.server.server} {s.server.source}"
    longest, source = max_request(w, context)
    if longest is None:
        return None, ""
    if s.server is not None:
        return longest, f"{s.server.server} waits without limit; longest request from {source}"
    return longest, f"longest request from {source}"


def over_budget(w: Workload, s: Serving, context: Context) -> tuple[Budget, str] | None:
    """The budget grace-budget reports: a known deadline that does not fit. An unset grace
    measured only against the longest request is grace-default's case."""
    # s is one of w's (serving(w) keeps them), so the context is all that can differ.
    kept = s.budget
    if kept is not None and kept[0] is context:
        return kept[1]
    found = _over_budget(w, s, context)
    s.budget = (context, found)
    return found


def _over_budget(w: Workload, s: Serving, context: Context) -> tuple[Budget, str] | None:
    deadline, source = shutdown_deadline(w, s, context)
    if deadline is None:
        return None
    drain_delay = s.delay.known
    # Budget.fits, asked before the record is made: most budgets fit, and two rules ask.
    if w.grace - (drain_delay + deadline + context.buffer_seconds) >= 0:
        return None
    if not w.grace_set and "longest request" in source:
        return None
    return Budget(w.grace, drain_delay, deadline, context.buffer_seconds), source


def _grace_edit(w: Workload, context: Context, grace: int) -> tuple[Edit, ...]:
    """Raising the grace period is safe (it only lets shutdown take longer), unless a
    platform cap forbids the new value."""
    if context.max_grace_seconds is not None and grace > context.max_grace_seconds:
        return ()
    if w.embedded:
        return ()
    return (Edit(w.grace_path, grace),)


def _workloads(index: Index) -> Iterator[Workload]:
    return iter(index.workloads)


GRACE_BUDGET = rule(
    "grace-budget", Severity.ERROR,
    "The grace period is shorter than drain delay + server shutdown deadline + buffer.",
    """
The kubelet's countdown to SIGKILL starts before the preStop hook runs and covers the hook
and the server's own shutdown together; SIGTERM is sent only when the hook returns. So the
grace period must hold the drain delay (preStop sleep), then the server's shutdown deadline
(how long it lets in-flight requests finish), plus a few seconds of buffer. Otherwise SIGKILL
lands in the middle of the drain and cuts the responses the server was still finishing.

The deadline comes from the annotation drainsafe.io/shutdown-seconds, or from the server's
own flags on the command line (or a known image's entrypoint and tag): uvicorn
--timeout-graceful-shutdown, gunicorn/hypercorn --graceful-timeout (defaults 30 s / 3 s),
vLLM --shutdown-timeout (v0.18.0 on), TGI --graceful-termination-timeout (default 90 s),
Triton --exit-timeout-secs (default 30 s), drainsafe serve/run --shutdown-timeout. A server
that waits without limit (uvicorn's default, SGLang) is budgeted for the declared longest
request.

Sources: kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/ ("the grace period
applies to the total time it takes for both the PreStop hook to execute and for the Container
to stop normally"); kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination
(the one-off 2 s extension for an overrunning hook); the servers' flags and defaults, each
read at a release: vllm 0.18.0 vllm/engine/arg_utils.py (--shutdown-timeout, default 0);
huggingface/text-generation-inference v3.3.6 launcher/src/main.rs
(graceful_termination_timeout, default 90); triton-inference-server/server v2.71.0
src/command_line_parser.h (exit_timeout_secs_ 30); encode/uvicorn 0.55.0 config.py;
gunicorn 27.0.1 gunicorn/config.py; hypercorn 0.18.0 src/hypercorn/config.py.
""")


@GRACE_BUDGET.check
def _grace_budget(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        for s in serving(w):
            found = over_budget(w, s, context)
            if found is None:
                continue
            budget, source = found
            required = budget.required
            grace = math.ceil(required)
            yield GRACE_BUDGET.finding(
                w,
                f"container {s.container.name}: grace {SECONDS[budget.grace]}s < drain delay "
                f"{SECONDS[budget.drain_delay]}s + shutdown deadline "
                f"{SECONDS[budget.shutdown_deadline]}s ({source}) + buffer "
                f"{SECONDS[budget.buffer]}s = {SECONDS[required]}s; SIGKILL at "
                f"{SECONDS[budget.sigkill_at]}s cuts the drain short",
                pod_fix(w.pod_path, {"terminationGracePeriodSeconds": grace}),
                path=w.grace_path if w.grace_set else w.pod_path,
                budget=budget,
                edits=_grace_edit(w, context, grace),
            )


SHUTDOWN_SHORT = rule(
    "shutdown-deadline-short", Severity.WARNING,
    "The server's shutdown deadline is shorter than the longest request it must finish.",
    """
After SIGTERM the server stops accepting and gives in-flight requests its shutdown deadline;
what is still running then is cancelled, however long the grace period is. Defaults are short
for LLM generations that run up to 90 s: hypercorn's graceful_timeout is 3 s, gunicorn's 30 s,
Triton's --exit-timeout-secs 30 s. Set the deadline to at least the longest request.

The fix sets the server's own flag, in the container's args shown whole (a strategic merge
patch replaces the list); on a release that has no such flag (TGI before v3.2.2, which waits
a fixed 90 s) it runs the server under drainsafe run, which holds SIGTERM until nothing is
in flight.

Sources: hypercorn 0.18.0 src/hypercorn/config.py (graceful_timeout: float = 3 * SECONDS);
gunicorn 27.0.1 gunicorn/config.py (GracefulTimeout, default 30); triton-inference-server/
server v2.71.0 src/command_line_parser.cc ("Timeout (in seconds) when exiting to wait for
in-flight inferences to finish") and command_line_parser.h (default 30);
huggingface/text-generation-inference v3.3.6 launcher/src/main.rs (--graceful-termination-
timeout, default 90; added in #3126, first released in v3.2.2).
""")


@SHUTDOWN_SHORT.check
def _shutdown_short(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        longest, source = max_request(w, context)
        if longest is None:
            continue
        for s in serving(w):
            if s.server is None or not s.server.drains or s.server.deadline is None:
                continue
            if s.server.deadline >= longest:
                continue
            want = math.ceil(longest)
            yield SHUTDOWN_SHORT.finding(
                w,
                f"container {s.container.name}: {s.server.server} shutdown deadline "
                f"{SECONDS[s.server.deadline]}s ({s.server.source}) < longest request "
                f"{SECONDS[longest]}s ({source})",
                deadline_fix(w, s, context, want),
                path=(*s.container.path, "args") if "args" in s.container.spec
                else s.container.path,
            )


_DEADLINE_FIXES: dict[tuple[object, ...], str] = {}


def deadline_fix(w: Workload, s: Serving, context: Context, deadline: int) -> str:
    """The snippet that gives the server `deadline` seconds to drain: its own flag where
    its release has one, else `drainsafe run`; the grace period grows to fit."""
    # A fleet's servers share their fix, so it is kept on everything _deadline_fix reads:
    # the pod's path and grace; the container's name, command and args as written, and the
    # probe handlers the wrapper's readinessProbe deletes; the entrypoint words and shell
    # script of its command line; the server and release (its flags follow from them); the
    # drain delay; the context's seconds; the deadline. Making the wrapper's fields and
    # their snippet key was ~6.5 us a finding (findings-heavy sarif -1.5 % instructions).
    assert s.server is not None
    spec = s.container.spec
    line = s.line
    readiness = mapping(spec.get("readinessProbe"))
    key = (w.pod_path, w.grace, s.container.name,
           _words(spec.get("command")), bool(spec.get("command")), _words(spec.get("args")),
           tuple([h for h in PROBE_HANDLERS if h in readiness]),
           None if line is None else (line.argv[:line.entrypoint], line.shell_script),
           s.server.server, s.server.release, s.delay.present, s.delay.known,
           context.propagation_seconds, context.buffer_seconds, deadline)
    text = _DEADLINE_FIXES.get(key)
    if text is None:
        text = _deadline_fix(w, s, context, deadline)
        if len(_DEADLINE_FIXES) < 10_000:
            _DEADLINE_FIXES[key] = text
    return text


def _words(value: object) -> tuple[str, ...]:
    """A command or args list as the fixes write it: each word as text."""
    return tuple([str(word) for word in sequence(value)])


def _deadline_fix(w: Workload, s: Serving, context: Context, deadline: int) -> str:
    assert s.server is not None
    flag = s.server.deadline_flag
    if flag is not None:
        fields = with_flag(s.container, s.line, flag, str(deadline))
        delay = s.delay.known
        note = ""
        if s.server.release is None and s.server.deadline_flag_since:
            note = (f"\n# {flag} needs {s.server.deadline_flag_since}; on older releases "
                    "run the server under drainsafe run")
    else:
        drain_delay = 0 if s.delay.present else math.ceil(context.propagation_seconds)
        fields = wrapped(s.container, s.line, s.server, drain_delay=drain_delay,
                         deadline=deadline)
        delay = max(drain_delay, s.delay.known)
        note = "\n" + WRAPPER_NOTE
    need = math.ceil(delay + deadline + context.buffer_seconds)
    pod = {"terminationGracePeriodSeconds": need} if need > w.grace else None
    return container_fix(w.pod_path, s.container.name, fields, pod) + note


GRACE_DEFAULT = rule(
    "grace-default", Severity.WARNING,
    "terminationGracePeriodSeconds is unset (30 s), too short for the longest request.",
    """
Unset, terminationGracePeriodSeconds is 30 s. An LLM generation can take 90 s; with a drain
delay in front of it the pod needs drain delay + longest request + buffer. When the longest
request is not declared (--max-request-seconds or the annotation
drainsafe.io/max-request-seconds) this rule says so instead of guessing.

Sources: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/ ("The default
terminationGracePeriodSeconds setting is 30 seconds").
""")


ASSUMED_LONGEST = 90
"""An LLM generation's usual upper end, in grace-default's example; the user states their own."""
_DECLARE_LONGEST = (
    f"# {ASSUMED_LONGEST} s is an example: declare your longest request\n"
    + dump({"metadata": {"annotations": {MAX_REQUEST_ANNOTATION: str(ASSUMED_LONGEST)}}}))


@GRACE_DEFAULT.check
def _grace_default(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        if w.grace_set or w.ref.kind == "Job":
            continue
        servers = serving(w)
        if any([over_budget(w, s, context) for s in servers]):  # a list: see serves_traffic
            continue  # grace-budget already reports it, with the server's own figures
        longest, source = max_request(w, context)
        if source != MAX_REQUEST_ANNOTATION and not serves_traffic(index, w):
            continue  # nothing says this workload serves requests
        if longest is None:
            delay = max((s.delay.known for s in servers), default=0.0)
            yield GRACE_DEFAULT.finding(
                w,
                f"grace unset (default {SECONDS[w.grace]}s) and the longest request is unknown: "
                f"declare it with --max-request-seconds or the {MAX_REQUEST_ANNOTATION} "
                "annotation to check the budget",
                _DECLARE_LONGEST + "\n" + pod_fix(w.pod_path, {
                    "terminationGracePeriodSeconds": math.ceil(
                        delay + ASSUMED_LONGEST + context.buffer_seconds)}),
                path=w.pod_path, severity=Severity.INFO,
            )
            continue
        delay = max((s.delay.known for s in servers), default=0.0)
        need = delay + longest + context.buffer_seconds
        if need <= w.grace:
            continue
        grace = max(recommended_grace(propagation=max(delay, 0.0), max_request=longest,
                                      margin=0, buffer=context.buffer_seconds),
                    math.ceil(need))
        yield GRACE_DEFAULT.finding(
            w,
            f"grace unset (default {SECONDS[w.grace]}s) < drain delay {SECONDS[delay]}s + "
            f"longest request {SECONDS[longest]}s ({source}) + buffer "
            f"{SECONDS[context.buffer_seconds]}s = {SECONDS[need]}s",
            pod_fix(w.pod_path, {"terminationGracePeriodSeconds": grace}),
            path=w.pod_path,
            budget=Budget(w.grace, delay, longest, context.buffer_seconds),
            edits=_grace_edit(w, context, grace),
        )


PRESTOP_MISSING = rule(
    "prestop-missing", Severity.WARNING,
    "A Service-backed container has no drain delay (no preStop sleep).",
    """
When a pod is deleted the kubelet sends SIGTERM while, in parallel, the endpoints controller
removes the pod from the Service's EndpointSlices and every kube-proxy, ingress controller and
load balancer catches up on its own schedule (typically 5-15 s). A server that closes its
listener at SIGTERM refuses the requests that still arrive: 502s on every rollout and drain.
A preStop sleep (or drainsafe serve's built-in drain delay) keeps serving until propagation
is over; SIGTERM waits for the hook. A longer grace period alone does not help.

Sources: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination;
kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/ (the hook must complete
before TERM is sent); kubernetes.io/docs/concepts/services-networking/endpoint-slices/
#conditions (a terminating endpoint is not ready; proxies follow on their own schedule).
""")


@PRESTOP_MISSING.check
def _prestop_missing(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        services = index.services_for(w)
        if not services or w.ref.kind == "Job":
            continue
        for s in serving(w):
            if s.delay.present:
                continue
            seconds = math.ceil(context.propagation_seconds)
            grace = math.ceil(w.grace + seconds)
            yield PRESTOP_MISSING.finding(
                w,
                f"container {s.container.name}: Service {services[0].ref.name} routes to it "
                "but nothing delays SIGTERM; endpoint removal takes "
                f"~{SECONDS[context.propagation_seconds]}s to propagate, so requests arriving "
                "meanwhile are refused",
                _delay_fix(w.pod_path, s.container.name, context, seconds, grace),
                path=s.container.path,
            )


_DELAY_FIXES: dict[tuple[Path, str, bool, int, int], str] = {}


def _delay_fix(pod_path: Path, name: str, context: Context, seconds: int, grace: int) -> str:
    """prestop-missing's fix, kept on all it is made of: a fleet's servers share it (2,001
    findings, 3 fixes on the findings-heavy corpus; its sarif -0.38 % instructions)."""
    sleep_action = context.at_least(1, 30)
    key = (pod_path, name, sleep_action, seconds, grace)
    text = _DELAY_FIXES.get(key)
    if text is None:
        text = container_fix(pod_path, name, {"lifecycle": {"preStop": _sleep_hook(
            context, seconds)}}, {"terminationGracePeriodSeconds": grace})
        if len(_DELAY_FIXES) < 10_000:
            _DELAY_FIXES[key] = text
    return text


def _sleep_hook(context: Context, seconds: int) -> dict[str, object]:
    if context.at_least(1, 30):
        return {"sleep": {"seconds": seconds}}
    return {"exec": {"command": ["sleep", str(seconds)]}}


PRESTOP_EXCEEDS_GRACE = rule(
    "prestop-exceeds-grace", Severity.ERROR,
    "The preStop sleep is as long as the grace period or longer.",
    """
The grace period covers the preStop hook and the shutdown. A hook that sleeps as long as the
grace period leaves the server no time at all: the kubelet grants a one-off 2 s extension and
then sends SIGKILL, so the server never gets to drain. The API server rejects a sleep action
that long ("must be greater than 0 and less than terminationGracePeriodSeconds"); an exec
sleep is accepted and silently cut off.

Sources: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/ ("If the preStop hook is
still running after the grace period expires, the kubelet requests a small, one-off grace
period extension of 2 seconds"); zalando-incubator/kubernetes-on-aws#9426 (the validation
error); rancher/dashboard#4333.
""")


@PRESTOP_EXCEEDS_GRACE.check
def _prestop_exceeds(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        for c in w.containers:
            delay = drain_delay(c)
            if delay.seconds is None or delay.seconds < w.grace:
                continue
            grace = math.ceil(delay.seconds + context.buffer_seconds + 1)
            yield PRESTOP_EXCEEDS_GRACE.finding(
                w,
                f"container {c.name}: preStop sleeps {SECONDS[delay.seconds]}s >= grace "
                f"{SECONDS[w.grace]}s; SIGKILL at {SECONDS[w.grace + 2]}s, before the server "
                "gets SIGTERM"
                if delay.seconds >= w.grace + 2 else
                f"container {c.name}: preStop sleeps {SECONDS[delay.seconds]}s >= grace "
                f"{SECONDS[w.grace]}s; the server gets at most 2 s after SIGTERM",
                pod_fix(w.pod_path, {"terminationGracePeriodSeconds": grace}),
                path=delay.path,
            )


SLEEP_UNSUPPORTED = rule(
    "sleep-action-unsupported", Severity.ERROR,
    "lifecycle.preStop.sleep needs Kubernetes >= 1.30 (and >= 1.33 for 0 seconds).",
    """
The sleep lifecycle action (KEP-3960, feature gate PodLifecycleSleepAction) is alpha and off
in 1.29, beta and on by default from 1.30, GA in 1.34. Zero seconds needs the gate
PodLifecycleSleepActionAllowZero (beta, on by default, from 1.33). On an older cluster the
field is rejected or dropped, and the pod has no drain delay at all.

Sources: kubernetes/website feature-gates/PodLifecycleSleepAction.md and
PodLifecycleSleepActionAllowZero.md; KEP-3960; VictoriaMetrics/operator#2522.
""")


@SLEEP_UNSUPPORTED.check
def _sleep_unsupported(index: Index, context: Context) -> Iterator[Finding]:
    if context.at_least(1, 33):
        return  # the sleep action, zero seconds too, is on by default (most clusters)
    for w in _workloads(index):
        for c in w.containers:
            delay = drain_delay(c)
            if delay.kind != "sleep-action":
                continue
            seconds = delay.known
            if not context.at_least(1, 30):
                exec_fix = container_fix(w.pod_path, c.name, {"lifecycle": pre_stop(
                    c, "exec", {"command": ["sleep", f"{seconds:g}"]})})
                yield SLEEP_UNSUPPORTED.finding(
                    w,
                    f"container {c.name}: preStop sleep action needs Kubernetes >= 1.30; "
                    f"cluster is {context.version_text}",
                    exec_fix, path=delay.path)
            elif seconds == 0 and not context.at_least(1, 33):
                yield SLEEP_UNSUPPORTED.finding(
                    w,
                    f"container {c.name}: preStop sleep of 0 seconds needs Kubernetes >= 1.33; "
                    f"cluster is {context.version_text}",
                    container_fix(w.pod_path, c.name, {"lifecycle": {"preStop": None}}),
                    path=delay.path)


EXEC_SLEEP_NO_SHELL = rule(
    "exec-sleep-no-shell", Severity.ERROR,
    "An exec preStop hook needs sh or sleep, but the image has no shell.",
    """
An exec hook runs inside the container's image. Distroless, scratch and static images have
no /bin/sh and no sleep binary, so the hook fails at once: the kubelet records
FailedPreStopHook and sends SIGTERM immediately, which is the same as having no drain delay.
Use the sleep action (Kubernetes >= 1.30), which the kubelet performs itself, or a drain delay
built into the server (drainsafe serve --drain-delay).

Sources: GitLab charts MR 5539; kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/
(hook handler failures); KEP-3960 (motivation: images without a shell).
""")


@EXEC_SLEEP_NO_SHELL.check
def _exec_no_shell(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        for c in w.containers:
            delay = drain_delay(c)
            if delay.kind not in ("exec", "exec-sleep") or not needs_shell(delay.command):
                continue
            if not shell_less(c.image):
                continue
            seconds = math.ceil(delay.seconds or context.propagation_seconds)
            yield EXEC_SLEEP_NO_SHELL.finding(
                w,
                f"container {c.name}: preStop runs {delay.command[0]!r} but image {c.image} "
                "has no shell; the hook fails and SIGTERM comes at once",
                container_fix(w.pod_path, c.name,
                              {"lifecycle": pre_stop(c, "sleep", {"seconds": seconds})}),
                path=delay.path,
            )


SIGNAL_NOT_FORWARDED = rule(
    "signal-not-forwarded", Severity.ERROR,
    "The server runs under a shell without exec, so SIGTERM never reaches it.",
    """
The kubelet sends SIGTERM to the container's PID 1. With `sh -c "setup; server"` PID 1 is
the shell, which does not forward signals to its children; the server keeps running until
SIGKILL at the end of the grace period and never drains (a shell running a single command
execs it, which is fine). Start the server with `exec` as the script's last command, or use an
init such as tini, or put the server in command/args directly.

Sources: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination (TERM to
the main process); POSIX sh, which leaves signal handling of children to them.
""")


@SIGNAL_NOT_FORWARDED.check
def _signal(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        if w.ref.kind == "Job":
            continue
        for c in w.containers:
            line = c.command_line
            if line is None or line.shell_script is None or signal_forwarded(line):
                continue
            tail, script = _exec_last(line.shell_script)
            field = "args" if line.shell_script in (c.spec.get("args") or ()) else "command"
            words = [str(word) for word in c.spec.get(field) or ()]
            yield SIGNAL_NOT_FORWARDED.finding(
                w,
                f"container {c.name}: {line.argv[0]} -c runs several commands and does not "
                f"exec the last one ({tail[:60]!r}); SIGTERM stops at the shell",
                container_fix(w.pod_path, c.name, {
                    field: [script if word == line.shell_script else word for word in words]}),
                path=(*c.path, field),
            )


def _exec_last(script: str) -> tuple[str, str]:
    """The script's last command, and the script with that command started by `exec`."""
    statements = [part for part in re.split(r";|&&|\|\||\n", script)
                  if part.strip() and not part.strip().startswith("#")]
    if not statements:
        return "", script
    tail = statements[-1].strip()
    at = script.rfind(tail)
    if tail.startswith("exec "):
        return tail, script
    return tail, script[:at] + "exec " + script[at:]


SERVER_ABORTS = rule(
    "server-aborts-on-sigterm", Severity.ERROR,
    "A known server whose default shutdown aborts in-flight requests.",
    """
Some servers drop in-flight work on SIGTERM unless told to drain. vLLM's default shutdown
aborts every running generation: --shutdown-timeout defaults to 0 ("0 = abort, >0 = wait"),
and it is vLLM's only shutdown setting (there is no --shutdown-mode or
--shutdown-drain-timeout; an unknown flag stops the server at start). No preStop hook or
grace period can save those requests. The server is found from the command line, or from
the image when only args are given (vllm/vllm-openai runs `vllm serve`), and its tag decides
the fix: from v0.18.0, --shutdown-timeout with a deadline that fits the grace period, in the
args shown whole; before v0.18.0 the flag does not exist, so the fix runs vLLM under
drainsafe run --mode signal, which holds SIGTERM until no request is in flight (its
endpoints on the admin port drainsafe-admin, 8490). An image without a release in its tag
gets the flag with a note on the release it needs.

Sources: vllm 0.18.0 and 0.32.0 vllm/engine/arg_utils.py (--shutdown-timeout, int, default
0), absent from vllm 0.17.1; vllm-project/vllm PR #36666 (the flag; "Default, no timeout -
abort all in-flight requests immediately"); vllm-project/vllm docker/Dockerfile, stage
vllm-openai (ENTRYPOINT ["vllm", "serve"]); KServe PR #5496 ("Without this, SIGTERM caused
vLLM to abort in-flight requests immediately").
""")


@SERVER_ABORTS.check
def _server_aborts(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        for s in serving(w):
            if s.server is None or s.server.drains:
                continue
            deadline = math.floor(fit_deadline(grace=w.grace, drain_delay=s.delay.known,
                                               buffer=context.buffer_seconds))
            longest, _ = max_request(w, context)
            fix_deadline = max(deadline, 1) if longest is None else math.ceil(longest)
            yield SERVER_ABORTS.finding(
                w,
                f"container {s.container.name}: {s.server.server} runs without a drain setting "
                f"({s.server.source}): SIGTERM aborts every in-flight request",
                deadline_fix(w, s, context, fix_deadline),
                path=(*s.container.path, "args") if "args" in s.container.spec
                else s.container.path,
            )


FLAG_UNRELEASED = rule(
    "deadline-flag-unreleased", Severity.ERROR,
    "A server's drain flag on a release that does not have it yet: the server will not start.",
    """
vLLM's --shutdown-timeout first shipped in v0.18.0 and TGI's --graceful-termination-timeout
in v3.2.2. Both parse their arguments strictly, so on an older image (the release read from
the tag) the flag stops the server at start with an unknown-argument error, and the pod
restarts forever. Either move to a release that has the flag, or drop the flag and run the
server under drainsafe run --mode signal, which holds SIGTERM until nothing is in flight;
the fix shows the second, with the server's arguments whole.

Sources: vllm 0.18.0 vllm/engine/arg_utils.py (--shutdown-timeout), absent from vllm 0.17.1;
huggingface/text-generation-inference v3.2.2 launcher/src/main.rs
(graceful_termination_timeout), absent from v3.2.1; argparse and clap reject unknown
arguments.
""")


@FLAG_UNRELEASED.check
def _flag_unreleased(index: Index, context: Context) -> Iterator[Finding]:
    for w in _workloads(index):
        for s in serving(w):
            flag = s.server.unreleased_flag if s.server is not None else None
            if s.server is None or flag is None or not sets_flag(s.line, flag):
                continue
            release = ".".join(map(str, s.server.release or ()))
            deadline = math.ceil(s.server.deadline or 0) or math.floor(fit_deadline(
                grace=w.grace, drain_delay=s.delay.known, buffer=context.buffer_seconds))
            yield FLAG_UNRELEASED.finding(
                w,
                f"container {s.container.name}: {flag} is not in {s.server.server} {release} "
                f"({s.server.deadline_flag_since} has it): the server stops at start",
                deadline_fix(w, s, context, max(deadline, 1)),
                path=(*s.container.path, "args") if "args" in s.container.spec
                else s.container.path,
            )


GRACE_CAP = rule(
    "grace-exceeds-cap", Severity.WARNING,
    "The grace period is above the platform's cap (--max-grace-seconds).",
    """
Platforms cap how long they wait for a pod to stop. cluster-autoscaler waits at most
--max-graceful-termination-sec (default 600 s) when it scales a node down and then kills the
pod; managed node upgrades and spot reclaims have their own limits. A grace period above the
cap promises time the platform will not give; size the shutdown to fit it.

Sources: kubernetes/autoscaler cluster-autoscaler FAQ and flags
(max-graceful-termination-sec, default 600).
""")


@GRACE_CAP.check
def _grace_cap(index: Index, context: Context) -> Iterator[Finding]:
    cap = context.max_grace_seconds
    if cap is None:
        return
    for w in _workloads(index):
        if w.grace <= cap:
            continue
        yield GRACE_CAP.finding(
            w,
            f"grace {w.grace:g}s > platform cap {cap:g}s (--max-grace-seconds); the platform "
            f"kills the pod at {cap:g}s",
            pod_fix(w.pod_path, {"terminationGracePeriodSeconds": math.floor(cap)}),
            path=w.grace_path,
        )
