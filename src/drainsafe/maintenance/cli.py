"""`drainsafe maintenance`: create, watch, pause, mark and delete NodeMaintenances (issue 30).

`delete` asks the leader to give the nodes back (maintenance.delete says what is left).

A thin shell over the API; each decision is a pure function below (`manifest_from_flags`,
`done_refusal`, `done_value`, `node_rows`, `changed_lines`, `watch_exit`), tested without a cluster.

- The object `create` posts is the manifest `--dry-run` prints, so `kubectl apply -f` of
  that output makes the same object; it is checked by `spec.parse_spec`, the reconciler's
  own reading, before anything is sent.
- `-l` takes the labelSelector syntax of kubectl (apimachinery pkg/labels/selector.go
  Parse: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`), written back as
  a metav1.LabelSelector (matchLabels for equality, matchExpressions for the rest), the
  inverse of LabelSelectorAsSelector that `spec.selector_string` follows.
- `done` refuses to mark a node before it is AwaitingMaintenance: a mark already there when
  the drain ends is recorded and does not count (maintenance.maintained), so writing one
  early would do nothing. It writes `<name>/<time>` (`done_value`), a value other than the
  one recorded, so its mark always counts.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drainsafe.shell import EXIT_API, EXIT_FAILED, EXIT_OK, EXIT_USAGE, exit_codes_text

INSTALL_HINT = ("the NodeMaintenance resource (nodemaintenances.drainsafe.io) is not served "
                "by this cluster; install it with: kubectl apply -k deploy/controller")


class NotServed(Exception):
    """The cluster does not serve nodemaintenances.drainsafe.io (the CRD is not installed)."""


class FlagError(ValueError):
    """A bad flag value; the message names the flag."""


# -- pure: flags -> manifest ------------------------------------------------------------

_SET_EXPR = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two requirements)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def label_selector(text: str) -> dict[str, Any]:
    """`-l` text -> metav1.LabelSelector. Raises FlagError naming -l."""
    match_labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    for part in _split_selector(text):
        if eq := _EQ_EXPR.match(part):
            key, op, value = eq.groups()
            if op == "!=":
                exprs.append({"key": key, "operator": "NotIn", "values": [value]})
            else:
                match_labels[key] = value
        elif (s := _SET_EXPR.match(part)) and not (s.group(1) and s.group(3)):
            neg, key, op, values = s.groups()
            if op:
                vals = sorted(v.strip() for v in values.split(",") if v.strip())
                exprs.append({"key": key, "operator": "In" if op == "in" else "NotIn",
                              "values": vals})
            else:
                exprs.append({"key": key, "operator": "DoesNotExist" if neg else "Exists"})
        else:
            raise FlagError(f"-l/--selector: cannot parse {part.strip()!r} in {text!r}")
    out: dict[str, Any] = {}
    if match_labels:
        out["matchLabels"] = match_labels
    if exprs:
        out["matchExpressions"] = exprs
    return out


def int_or_percent(text: str, flag: str) -> int | str:
    """`3` -> 3, `25%` -> "25%" (intstr: a percent stays a string)."""
    if re.fullmatch(r"\d+", text):
        return int(text)
    if re.fullmatch(r"\d+%", text):
        return text
    raise FlagError(f"{flag}: {text!r} is not a whole number or a percent like 25%")


@dataclass(frozen=True)
class CreateFlags:
    name: str
    selector: str | None = None
    nodes: tuple[str, ...] = ()
    max_parallel_nodes: int = 1
    max_unavailable: str | None = None
    capacity_floor: str | None = None  # spec.capacityFloor.default (N or P%)
    uncordon: str = "Immediately"
    reason: str = ""
    strategy: str = "surge"
    paused: bool = False
    # spec.maintainedWhen (uncordon: WhenMaintained); none given: the annotation alone
    when_condition: str | None = None  # TYPE or TYPE=STATUS
    when_rebooted: bool = False
    when_kubelet_version: str | None = None
    no_annotation: bool = False
    when_timeout: int | None = None  # maintainedWhen.timeoutSeconds

    def maintained_when(self) -> dict[str, Any] | None:
        if not (self.when_condition or self.when_rebooted or self.when_kubelet_version
                or self.no_annotation or self.when_timeout is not None):
            return None
        out: dict[str, Any] = {}
        if self.no_annotation:
            out["annotation"] = False
        if self.when_condition:
            kind, _, status = self.when_condition.partition("=")
            out["nodeCondition"] = {"type": kind, "status": status or "True"}
        if self.when_rebooted:
            out["bootIDChanged"] = True
        if self.when_kubelet_version:
            out["kubeletVersion"] = self.when_kubelet_version
        if self.when_timeout is not None:
            out["timeoutSeconds"] = self.when_timeout
        return out


def manifest_from_flags(f: CreateFlags) -> dict[str, Any]:
    """The NodeMaintenance object `create` posts (and `--dry-run` prints), checked by the
    reconciler's parse_spec first. Raises FlagError naming the flag at fault."""
    from drainsafe.maintenance.spec import GROUP_VERSION, KIND, SpecError, parse_spec

    if not f.selector and not f.nodes:
        raise FlagError("-l/--selector or --node: select the nodes (no flag selects every "
                        "node; a whole-cluster maintenance is never implied)")
    spec: dict[str, Any] = {}
    if f.selector:
        spec["nodeSelector"] = label_selector(f.selector)
        if not spec["nodeSelector"]:
            raise FlagError("-l/--selector: an empty selector would select every node")
    if f.nodes:
        spec["nodeNames"] = list(f.nodes)
    if f.max_parallel_nodes < 1:
        raise FlagError(f"--max-parallel-nodes: {f.max_parallel_nodes} is below 1")
    spec["maxParallelNodes"] = f.max_parallel_nodes
    if f.max_unavailable is not None:
        spec["maxUnavailable"] = int_or_percent(f.max_unavailable, "--max-unavailable")
    if f.capacity_floor is not None:
        # the default floor only: per-workload rules are kubectl apply's (a list of
        # selectors and floors reads badly as flags)
        spec["capacityFloor"] = {
            "default": int_or_percent(f.capacity_floor, "--capacity-floor")}
    spec["uncordon"] = f.uncordon
    if f.reason:
        spec["reason"] = f.reason
    spec["drain"] = {"strategy": f.strategy}
    if f.paused:
        spec["paused"] = True
    if (when := f.maintained_when()) is not None:
        spec["maintainedWhen"] = when
    obj = {"apiVersion": GROUP_VERSION, "kind": KIND, "metadata": {"name": f.name},
           "spec": spec}
    try:
        parse_spec(obj)
    except SpecError as exc:
        flag = {"maxUnavailable": "--max-unavailable", "uncordon": "--uncordon",
                "drain.strategy": "--strategy", "nodeSelector": "-l/--selector",
                "maxParallelNodes": "--max-parallel-nodes",
                "capacityFloor": "--capacity-floor",
                "maintainedWhen.nodeCondition": "--when-condition",
                "maintainedWhen.kubeletVersion": "--when-kubelet-version",
                "maintainedWhen.timeoutSeconds": "--when-timeout",
                "maintainedWhen": "--when-*"}
        named = next((v for k, v in flag.items() if str(exc).startswith(k)), "spec")
        raise FlagError(f"{named}: {exc}") from exc
    return obj


# YAML 1.1 booleans, which kubectl's YAML reader (sigs.k8s.io/yaml over go-yaml v2) takes
# as true/false when unquoted and PyYAML writes bare: a label value `y` would reach the API
# server as a boolean and be refused.
_YAML11_BOOL = re.compile(r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE"
                          r"|on|On|ON|off|Off|OFF)$")


def manifest_yaml(obj: Mapping[str, Any]) -> str:
    """The object as YAML that `kubectl apply -f` reads back to the same object."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = '"' if _YAML11_BOOL.match(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    return str(yaml.dump(dict(obj), Dumper=Dumper, sort_keys=False))


# -- pure: done, rows, watch outcome ----------------------------------------------------

def done_refusal(maintenance: Mapping[str, Any], node: str) -> str | None:
    """Why `done NODE` must not mark the node now (None: it may)."""
    name = maintenance.get("metadata", {}).get("name", "")
    uncordon = (maintenance.get("spec") or {}).get("uncordon", "Immediately")
    if uncordon != "WhenMaintained":
        return (f"NodeMaintenance {name} uses uncordon: {uncordon}, not WhenMaintained; "
                "it does not wait for a done mark")
    when = (maintenance.get("spec") or {}).get("maintainedWhen") or {}
    if when.get("annotation") is False:
        return (f"NodeMaintenance {name} has maintainedWhen.annotation: false; only its "
                "other marks (a condition, a reboot, a kubelet version) finish a node")
    nodes = {n.get("name"): n for n in (maintenance.get("status") or {}).get("nodes") or []}
    if node not in nodes:
        return f"node {node} is not part of NodeMaintenance {name}"
    state = nodes[node].get("state", "Pending")
    if state == "Failed" and nodes[node].get("reason") == "MaintenanceTimedOut":
        return (f"node {node} timed out waiting for its mark in NodeMaintenance {name} "
                "(maintainedWhen.timeoutSeconds) and is Failed, left cordoned and recorded: "
                f"`drainsafe uncordon {node}` once its maintenance is done, or delete the "
                "NodeMaintenance to give it back")
    if state != "AwaitingMaintenance":
        return (f"node {node} is {state} in NodeMaintenance {name}, not AwaitingMaintenance; "
                "a mark set before its drain ends does not count (the maintenance is not "
                "done before the node is drained): mark it once it is AwaitingMaintenance")
    return None


def done_value(maintenance: Mapping[str, Any], node: str, now: float) -> str:
    """The drainsafe.io/maintained value `done NODE` writes: one that counts, whatever the
    node carried when its drain ended (its status row's recorded.maintained)."""
    from drainsafe.maintenance.maintained import done_mark

    name = str(maintenance.get("metadata", {}).get("name", ""))
    rows = (maintenance.get("status") or {}).get("nodes") or []
    row: Mapping[str, Any] = next((r for r in rows if r.get("name") == node), {})
    return done_mark(name, now, str((row.get("recorded") or {}).get("maintained") or ""))


ROW_COLUMNS = ("NODE", "STATE", "WAVE", "REASON", "STARTED", "FINISHED")
Row = tuple[str, str, str, str, str, str]


def node_rows(status: Mapping[str, Any]) -> list[Row]:
    """One row per node of a status, in the status's order."""
    from drainsafe.maintenance.progress import read_nodes

    return [(n.name, n.state, str(n.wave) if n.wave else "-",
             n.reason + (f": {n.message}" if n.message else ""),
             n.started or "-", n.finished or "-")
            for n in read_nodes(status).values()]


def summary_line(name: str, status: Mapping[str, Any]) -> str:
    return (f"{name}: {status.get('phase', 'Pending')} done {status.get('done', 0)}/"
            f"{status.get('total', 0)} failed {status.get('failed', 0)} "
            f"wave {status.get('currentWave', 0)}")


def changed_lines(name: str, old: Mapping[str, Any] | None,
                  new: Mapping[str, Any]) -> list[str]:
    """The lines a pipe gets for one change of status: the phase line when it changed, then
    a line per node whose row changed."""
    before = {r[0]: r for r in node_rows(old or {})}
    lines = []
    if old is None or summary_line(name, old) != summary_line(name, new):
        lines.append(summary_line(name, new))
    for row in node_rows(new):
        if before.get(row[0]) != row:
            lines.append(f"  {row[0]} {row[1]} wave={row[2]} reason={row[3] or '-'}")
    return lines


def watch_exit(obj: Mapping[str, Any] | None) -> int | None:
    """The watch's exit code once the object is finished (None: keep watching)."""
    if obj is None:
        return EXIT_FAILED  # deleted
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return EXIT_OK
    if phase == "Failed":
        return EXIT_FAILED
    return None


# -- the shell ------------------------------------------------------------------------

def _connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                   help="timeout of one API request (default 30)")


def register(subparsers: Any) -> None:
    m = subparsers.add_parser(
        "maintenance", help="create and follow NodeMaintenances (fleet drains in the cluster)",
        description="Create, follow, pause and resume NodeMaintenance objects, which "
        "drainsafe controller's leader drains in waves; mark a node maintained under "
        "uncordon: WhenMaintained. " + exit_codes_text(
            (EXIT_OK, "done (watch: Succeeded)"),
            (EXIT_FAILED, "watch: the maintenance Failed or was deleted; delete --wait: "
             "still there after --timeout"),
            (EXIT_USAGE, "usage or input error, a refused done mark"),
            (EXIT_API, "the API server cannot be reached, answers with an error, or does "
             "not serve NodeMaintenance")))
    sub = m.add_subparsers(dest="action", metavar="ACTION", required=True)

    c = sub.add_parser("create", help="create a NodeMaintenance")
    c.add_argument("name", metavar="NAME")
    c.add_argument("-l", "--selector", help="the nodes matching this label selector")
    c.add_argument("--node", action="append", default=[], metavar="NODE",
                   help="a node by name (repeat for more)")
    c.add_argument("--max-parallel-nodes", type=int, default=1, metavar="N")
    c.add_argument("--max-unavailable", metavar="N|P%")
    c.add_argument("--capacity-floor", metavar="N|P%",
                   help="the fewest Ready replicas a drain may take each workload to, or a "
                   "percent of desired: spec.capacityFloor.default (100%% unless --strategy "
                   "evict, then 0); per-workload floors: kubectl apply")
    c.add_argument("--uncordon", choices=("Immediately", "Never", "WhenMaintained"),
                   default="Immediately")
    c.add_argument("--reason", default="")
    c.add_argument("--strategy", choices=("surge", "evict"), default="surge")
    c.add_argument("--paused", action="store_true",
                   help="create it paused: the nodes are listed, none starts until resume")
    c.add_argument("--when-condition", metavar="TYPE[=STATUS]",
                   help="WhenMaintained: a node is maintained once its condition TYPE has "
                   "STATUS (default True): spec.maintainedWhen.nodeCondition")
    c.add_argument("--when-rebooted", action="store_true",
                   help="WhenMaintained: a node is maintained once its boot ID differs from "
                   "the one at its drain, or it was replaced: maintainedWhen.bootIDChanged")
    c.add_argument("--when-kubelet-version", metavar="VERSION|changed",
                   help="WhenMaintained: a node is maintained once its kubelet reports at "
                   "least VERSION, or (changed) another version than at its drain")
    c.add_argument("--when-timeout", type=int, metavar="SECONDS",
                   help="WhenMaintained: a drained node not marked maintained SECONDS after "
                   "its drain fails (MaintenanceTimedOut), left cordoned and recorded: "
                   "maintainedWhen.timeoutSeconds")
    c.add_argument("--no-annotation", action="store_true",
                   help="WhenMaintained: the drainsafe.io/maintained annotation (done) does "
                   "not count, only the --when-* marks")
    c.add_argument("--dry-run", action="store_true", help="print the YAML it would create")
    c.add_argument("--watch", action="store_true", help="then follow it, as watch")
    c.set_defaults(handler=run_create)

    w = sub.add_parser("watch", help="follow a NodeMaintenance until it finishes")
    w.add_argument("name", metavar="NAME")
    w.set_defaults(handler=run_watch)
    s = sub.add_parser("status", help="print a NodeMaintenance's table once")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(handler=run_status)
    for verb, paused in (("pause", True), ("resume", False)):
        p = sub.add_parser(verb, help=f"{verb} a NodeMaintenance (spec.paused={paused})")
        p.add_argument("name", metavar="NAME")
        p.set_defaults(handler=run_pause, paused=paused)
    d = sub.add_parser("done", help="mark a node maintained (uncordon: WhenMaintained)")
    d.add_argument("node", metavar="NODE")
    d.add_argument("--maintenance", required=True, metavar="NAME")
    d.set_defaults(handler=run_done)
    x = sub.add_parser("delete",
                       help="delete a NodeMaintenance; the controller gives back its nodes")
    x.add_argument("name", metavar="NAME")
    x.add_argument("--wait", action="store_true",
                   help="follow the give-back until the object is gone")
    x.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="with --wait: exit 1 if still there after S seconds (default 300)")
    x.set_defaults(handler=run_delete)
    for p in (c, w, s, d, x, *(sub.choices[v] for v in ("pause", "resume"))):
        _connection(p)


def _path(name: str | None = None) -> str:
    from drainsafe.kube import api_path
    from drainsafe.maintenance.spec import GROUP_VERSION, PLURAL

    return api_path(GROUP_VERSION, PLURAL, name=name)


def _err(action: str, message: str) -> None:
    print(f"drainsafe maintenance {action}: {message}", file=sys.stderr)


def _run(args: argparse.Namespace, body: Any) -> int:
    """Client from kubeconfig, run `body(client)`, map errors to the shared codes."""
    from drainsafe.kube import KubeClient, KubeconfigError, KubeError
    from drainsafe.shell import run_async

    try:
        client = KubeClient.from_kubeconfig(args.kubeconfig, args.context,
                                            timeout=args.request_timeout)
    except (KubeconfigError, ValueError, RuntimeError) as exc:
        _err(args.action, str(exc))
        return EXIT_USAGE

    async def go() -> int:
        async with client:
            return int(await body(client))

    try:
        return run_async(go())
    except NotServed:
        _err(args.action, INSTALL_HINT)
        return EXIT_API
    except KubeError as exc:
        _err(args.action, f"API error: {exc}")
        return EXIT_API


async def _get_or_none(client: Any, name: str) -> dict[str, Any] | None:
    from drainsafe.kube import NotFound

    try:
        return dict(await client.get(_path(name)))
    except NotFound:
        if await _crd_served(client):
            return None
        raise NotServed from None


async def _crd_served(client: Any) -> bool:
    from drainsafe.kube import NotFound

    try:
        await client.list(_path())
        return True
    except NotFound:
        return False


def run_create(args: argparse.Namespace) -> int:
    flags = CreateFlags(name=args.name, selector=args.selector, nodes=tuple(args.node),
                        max_parallel_nodes=args.max_parallel_nodes,
                        max_unavailable=args.max_unavailable,
                        capacity_floor=args.capacity_floor, uncordon=args.uncordon,
                        reason=args.reason, strategy=args.strategy, paused=args.paused,
                        when_condition=args.when_condition, when_rebooted=args.when_rebooted,
                        when_kubelet_version=args.when_kubelet_version,
                        no_annotation=args.no_annotation, when_timeout=args.when_timeout)
    try:
        obj = manifest_from_flags(flags)
    except FlagError as exc:
        _err("create", str(exc))
        return EXIT_USAGE
    if args.dry_run:
        print(manifest_yaml(obj), end="")
        return EXIT_OK

    async def body(client: Any) -> int:
        from drainsafe.kube import Conflict, NotFound

        try:
            await client.post(_path(), obj)
        except NotFound:
            _err("create", INSTALL_HINT)
            return EXIT_API
        except Conflict:
            _err("create", f"NodeMaintenance {args.name} already exists")
            return EXIT_USAGE
        print(f"nodemaintenance.drainsafe.io/{args.name} created")
        return await _watch(client, args.name) if args.watch else EXIT_OK

    return _run(args, body)


def run_watch(args: argparse.Namespace) -> int:
    return _run(args, lambda client: _watch(client, args.name))


def run_status(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        obj = await _get_or_none(client, args.name)
        if obj is None:
            _err("status", f"NodeMaintenance {args.name} not found")
            return EXIT_USAGE
        from drainsafe.shell import console

        _print_table(console(), args.name, obj.get("status") or {})
        return EXIT_OK

    return _run(args, body)


def run_pause(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        if await _get_or_none(client, args.name) is None:
            _err(args.action, f"NodeMaintenance {args.name} not found")
            return EXIT_USAGE
        await client.patch(_path(args.name), {"spec": {"paused": args.paused}})
        print(f"nodemaintenance.drainsafe.io/{args.name} {'paused' if args.paused else 'resumed'}")
        return EXIT_OK

    return _run(args, body)


def run_done(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        from drainsafe.kube import api_path
        from drainsafe.maintenance.maintained import MAINTAINED

        obj = await _get_or_none(client, args.maintenance)
        if obj is None:
            _err("done", f"NodeMaintenance {args.maintenance} not found")
            return EXIT_USAGE
        if (why := done_refusal(obj, args.node)) is not None:
            _err("done", f"refused: {why}")
            return EXIT_USAGE
        value = done_value(obj, args.node, time.time())
        await client.patch(api_path("v1", "nodes", name=args.node),
                           {"metadata": {"annotations": {MAINTAINED: value}}})
        print(f"node/{args.node} marked maintained for NodeMaintenance {args.maintenance} "
              f"({MAINTAINED}={value})")
        return EXIT_OK

    return _run(args, body)


def run_delete(args: argparse.Namespace) -> int:
    """DELETE, then with --wait the give-back per node (maintenance.delete) until gone."""
    async def body(client: Any) -> int:
        import asyncio
        import contextlib

        from drainsafe.kube import Informer, NotFound, api_path
        from drainsafe.maintenance.delete import release_lines

        if await _get_or_none(client, args.name) is None:
            _err("delete", f"NodeMaintenance {args.name} not found")
            return EXIT_USAGE
        changed = asyncio.Event()
        informers = [Informer(client, path, on_event=lambda *_: changed.set())
                     for path in (_path(), api_path("v1", "nodes"))]
        if args.wait:  # watching first: no change after the DELETE is missed
            for informer in informers:
                await informer.start()
        try:
            with contextlib.suppress(NotFound):  # gone meanwhile
                await client.request("DELETE", _path(args.name))
            print(f"nodemaintenance.drainsafe.io/{args.name} deleted")
            if not args.wait:
                return EXIT_OK
            shown: list[str] = []
            try:
                async with asyncio.timeout(args.timeout):
                    while True:
                        changed.clear()
                        obj = _find(informers[0].cache, args.name)
                        lines = release_lines(args.name, obj, {
                            str(n["metadata"]["name"]): n for n in informers[1].cache.values()})
                        for line in lines:
                            if line not in shown:
                                print(line, flush=True)
                        shown = lines
                        if obj is None:
                            return EXIT_OK
                        await changed.wait()
            except TimeoutError:
                _err("delete", f"NodeMaintenance {args.name} still there after "
                     f"{args.timeout:g}s (is drainsafe controller running?)")
                return EXIT_FAILED
        finally:
            for informer in informers:
                await informer.stop()

    return _run(args, body)


def _table(name: str, status: Mapping[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=summary_line(name, status), title_justify="left")
    for col in ROW_COLUMNS:
        table.add_column(col)
    for row in node_rows(status):
        table.add_row(*row)
    return table


def _print_table(console: Any, name: str, status: Mapping[str, Any]) -> None:
    console.print(_table(name, status))


async def _watch(client: Any, name: str) -> int:
    """Follow the object (list+watch); a live table on a terminal, lines in a pipe."""
    from drainsafe.kube import Informer
    from drainsafe.shell import console as make_console

    if not await _crd_served(client):
        raise NotServed
    con = make_console()
    # the whole collection (cluster-scoped, a few objects): no field selector to depend on
    informer = Informer(client, _path())
    last_rv: str | None = None
    last_status: dict[str, Any] | None = None
    live = None
    async with informer:
        first = _find(informer.cache, name)
        if first is None:
            _err("watch", f"NodeMaintenance {name} not found")
            return EXIT_USAGE
        if con.is_terminal:
            from rich.live import Live

            live = Live(_table(name, first.get("status") or {}), console=con,
                        auto_refresh=False)
            live.start()
        try:
            while True:
                change = await informer.wait_for(
                    functools.partial(_changed, name=name, seen_rv=last_rv),
                    timeout=365 * 86400.0, what=f"NodeMaintenance {name}")
                assert change is not None  # wait_for returns a truthy value
                obj = change.obj
                if obj is None:
                    _err("watch", f"NodeMaintenance {name} was deleted")
                    return EXIT_FAILED
                last_rv = obj["metadata"].get("resourceVersion")
                status = obj.get("status") or {}
                if live is not None:
                    live.update(_table(name, status), refresh=True)
                else:
                    for line in changed_lines(name, last_status, status):
                        print(line, flush=True)
                last_status = status
                if (code := watch_exit(obj)) is not None:
                    return code
        finally:
            if live is not None:
                live.stop()


@dataclass(frozen=True)
class _Change:
    obj: dict[str, Any] | None  # None: deleted


def _changed(cache: Mapping[str, Any], name: str, seen_rv: str | None) -> _Change | None:
    obj = _find(cache, name)
    if obj is None or obj["metadata"].get("resourceVersion") != seen_rv:
        return _Change(obj)
    return None


def _find(cache: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return next((dict(o) for o in cache.values() if o["metadata"]["name"] == name), None)
