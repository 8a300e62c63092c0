"""Each Kubernetes object concept is written once (issue 28).

Pod Ready, node Ready, Available, active, terminal, the controller reference, object keys,
the workload reference ("Kind/ns/name"), mid-rollout and the pod-template equality it
reads, the autoscaler lookup, the grace default and RFC 3339 times live in
src/drainsafe/kube/objects.py; read-decide-write on a 409 lives in
src/drainsafe/kube/retry.py. This test reads every module of src/drainsafe (its syntax
tree, not its imports) and fails when one of these is written anywhere else: a function
with a home's name, a condition `type` compared with "Ready", a workload key built or
split by hand, a literal 30 s grace, an RFC 3339 format or parse, a loop that catches
Conflict.

src/drainsafe/check is left out: the static checker reads manifests as written (a pod
template's grace as the author typed it, no live status), which is a different concept.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import drainsafe

SRC = Path(drainsafe.__file__).parent
OBJECTS = "kube/objects.py"
RETRY = "kube/retry.py"
EXCLUDED = ("check/",)

# Function names (leading underscores ignored) that belong to kube/objects.py.
OBJECT_FUNCTIONS = frozenset({
    "is_ready", "pod_ready", "is_pod_ready", "ready_condition", "node_ready", "is_node_ready",
    "condition", "is_available", "available_at", "available_since", "is_active",
    "is_terminal", "is_terminating", "controller_ref", "key_of", "cache_key", "pod_key",
    "object_key", "workload_key", "mid_rollout", "rollout_in_progress", "autoscaler_for",
    "autoscaler_of", "rfc3339", "rfc3339_micro", "now_rfc3339", "parse_time",
    "same_pod_template", "equal_ignore_hash", "scale_not_carried_out",
})
RETRY_FUNCTIONS = frozenset({"retry_on_conflict"})

# Copies the drain, controller and lab helpers remove in parallel with this test (issue 28).
# The lead empties this at merge; test_pending_is_still_pending says when an entry is done.
PENDING: dict[str, str] = {
}


def _name(node: ast.expr) -> str:
    return ast.unparse(node).lower()


def _is_type_lookup(node: ast.expr) -> bool:
    """`x.get("type")` or `x["type"]`: a condition's type."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == "type":
        return True
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
        and node.slice.value == "type"


def _is_thirty(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) \
        and isinstance(node.value, int | float) and node.value == 30


def _workload_fstring(node: ast.JoinedStr) -> bool:
    """f"{kind}/{ns}/{name}" or f"{kind}/{key_of(obj)}": a WorkloadRef written by hand."""
    parts = node.values
    if not parts or not isinstance(parts[0], ast.FormattedValue) \
            or "kind" not in _name(parts[0].value):
        return False
    seps = parts[1::2]
    values = parts[0::2]
    if not all(isinstance(s, ast.Constant) and s.value == "/" for s in seps) \
            or not all(isinstance(v, ast.FormattedValue) for v in values):
        return False
    if len(values) == 3 and len(seps) == 2:
        return True
    return len(values) == 2 and "key_of(" in _name(values[1].value)  # type: ignore[attr-defined]


def _workload_split(node: ast.Call) -> bool:
    """`ref.workload.split("/")` or `key.split("/", 2)`: a WorkloadRef read by hand."""
    if not isinstance(node.func, ast.Attribute) or node.func.attr not in ("split", "rsplit"):
        return False
    if not node.args or not (isinstance(node.args[0], ast.Constant)
                             and node.args[0].value == "/"):
        return False
    three = (len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
             and node.args[1].value == 2) or any(
        k.arg == "maxsplit" and isinstance(k.value, ast.Constant) and k.value.value == 2
        for k in node.keywords)
    return three or "workload" in _name(node.func.value)


def _catches_conflict(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return False
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(re.search(r"(^|\.)conflict$", _name(k)) for k in kinds)


class _Scan(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.found: list[str] = []
        self._loops = 0

    def _add(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.rel}:{getattr(node, 'lineno', 0)}: {what}")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = node.name.lstrip("_")
        if name in OBJECT_FUNCTIONS and self.rel != OBJECTS:
            self._add(node, f"def {node.name}: kube/objects.py has it")
        if name in RETRY_FUNCTIONS and self.rel != RETRY:
            self._add(node, f"def {node.name}: kube/retry.py has it")
        args = node.args
        positional = args.posonlyargs + args.args
        defaults = list(zip(positional[len(positional) - len(args.defaults):], args.defaults,
                            strict=True))
        defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                     if d is not None]
        for arg, default in defaults:
            if "grace" in arg.arg.lower() and _is_thirty(default):
                self._add(node, f"{arg.arg}=30: use kube.objects.DEFAULT_GRACE_SECONDS")
        loops, self._loops = self._loops, 0  # a loop outside a function is not its loop
        self.generic_visit(node)
        self._loops = loops

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        self._loops += 1
        self.generic_visit(node)
        self._loops -= 1

    visit_For = _loop
    visit_AsyncFor = _loop
    visit_While = _loop

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if self._loops and _catches_conflict(node) and self.rel != RETRY:
            self._add(node, "a loop retrying on Conflict: use kube.retry.retry_on_conflict")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if self.rel != OBJECTS and any(
                isinstance(s, ast.Constant) and s.value == "Ready" for s in sides) and any(
                _is_type_lookup(s) for s in sides):
            self._add(node, 'condition type == "Ready": use kube.objects')
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if self.rel != OBJECTS and _workload_fstring(node):
            self._add(node, "a Kind/ns/name key by hand: use kube.objects.WorkloadRef")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if self.rel != OBJECTS:
            if _workload_split(node):
                self._add(node, "a Kind/ns/name key split by hand: use WorkloadRef.parse")
            if isinstance(node.func, ast.Attribute) and node.func.attr == "fromisoformat":
                self._add(node, "an RFC 3339 parse: use kube.objects.parse_time")
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault") \
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value == "terminationGracePeriodSeconds" \
                    and _is_thirty(node.args[1]):
                self._add(node, "grace default 30: use kube.objects.DEFAULT_GRACE_SECONDS")
        for k in node.keywords:
            if k.arg and "grace" in k.arg.lower() and _is_thirty(k.value) \
                    and self.rel != OBJECTS:
                self._add(node, f"{k.arg}=30: use kube.objects.DEFAULT_GRACE_SECONDS")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if self.rel != OBJECTS and isinstance(node.value, str) and "%Y-%m-%dT" in node.value:
            self._add(node, "an RFC 3339 format: use kube.objects.rfc3339 / rfc3339_micro")

    def _assigned(self, targets: list[ast.expr], value: ast.expr | None) -> None:
        if self.rel != OBJECTS and _is_thirty(value) and any(
                "grace" in _name(t) for t in targets):
            self._add(targets[0], "a grace of 30: use kube.objects.DEFAULT_GRACE_SECONDS")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node.value)
        self.generic_visit(node)


def scan_source(rel: str, text: str) -> list[str]:
    scan = _Scan(rel)
    scan.visit(ast.parse(text))
    return scan.found


def scan_tree() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(EXCLUDED):
            continue
        hits = scan_source(rel, path.read_text())
        if hits:
            found[rel] = hits
    return found


def test_each_concept_is_written_once() -> None:
    found = scan_tree()
    copies = [hit for rel, hits in found.items() if rel not in PENDING for hit in hits]
    assert not copies, "second copies of kube/objects.py or kube/retry.py:\n" + "\n".join(
        copies)


def test_pending_is_still_pending() -> None:
    """An entry whose copy is gone must leave PENDING, so the list only shrinks."""
    done = sorted(set(PENDING) - set(scan_tree()))
    assert not done, f"no copies left in {done}: remove them from PENDING"


@pytest.mark.parametrize("source", [
    "def is_ready(pod): ...",
    "def _pod_key(pod): ...",
    "class A:\n    def _autoscaler_of(self, d): ...",
    "async def retry_on_conflict(c, p, d): ...",
    'ok = any(c.get("type") == "Ready" for c in conds)',
    'ok = c["type"] == "Ready"',
    'key = f"{kind}/{ns}/{name}"',
    'key = f"{w.kind}/{key_of(obj)}"',
    'ns = w.workload.split("/")[1]',
    'kind, ns, name = key.split("/", 2)',
    "DEFAULT_POD_GRACE_SECONDS = 30",
    "class S:\n    grace: int = 30",
    "def deployment(name, grace: int = 30): ...",
    "deployment(grace_seconds=30.0)",
    'spec.setdefault("terminationGracePeriodSeconds", 30)',
    'now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")',
    'when = datetime.fromisoformat(text.replace("Z", "+00:00"))',
    "async def f(c):\n    for _ in range(5):\n        try:\n            await c.put()\n"
    "        except Conflict:\n            continue",
    "async def f(c):\n    while True:\n        try:\n            await c.put()\n"
    "        except (NotFound, kube.Conflict):\n            pass",
])
def test_the_scan_sees_a_copy(source: str) -> None:
    assert scan_source("lab/somewhere.py", source)


@pytest.mark.parametrize("source", [
    'ready = condition(pod, "Ready")',
    'cols = [("Ready", "integer", 0)]',
    'row = f"{ref.get(\'kind\')}/{ref.get(\'name\')}"',  # kubectl's kind/name column
    'segs = path.split("/")',
    "retries = 30",
    "GRACES = (30.0, 60.0)",
    "try:\n    put()\nexcept Conflict:\n    pass",  # one write, no retry loop
    'stamp = datetime.now(UTC).strftime("%H:%M:%S.%f")',  # a display time, not RFC 3339
])
def test_the_scan_leaves_other_things_alone(source: str) -> None:
    assert scan_source("lab/somewhere.py", source) == []


def test_the_homes_may_define_their_own() -> None:
    assert scan_source(OBJECTS, 'def is_ready(pod): return c["type"] == "Ready"') == []
    assert scan_source(RETRY, "async def retry_on_conflict(): ...") == []
