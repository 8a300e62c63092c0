"""When is a node's maintenance done? (uncordon: WhenMaintained, spec.maintainedWhen)

What the API shows of a node after its maintenance, and what drainsafe reads here:

- a reboot: status.nodeInfo.bootID changes. The kubelet reports the boot ID the machine
  info gives it (kubernetes v1.33.0 pkg/kubelet/nodestatus/setters.go MachineInfo:
  `node.Status.NodeInfo.BootID = info.BootID`, with a NodeRebooted Warning event when it
  differs from the one stored), and cadvisor reads it from /proc/sys/kernel/random/boot_id
  (google/cadvisor machine/info.go, flag boot_id_file), a fresh random UUID at every boot;
- an upgrade: status.nodeInfo.kubeletVersion changes (setters.go VersionInfo:
  version.Get().String(), e.g. "v1.32.1");
- an external tool's verdict: a node condition (node-problem-detector, the GPU operator),
  or drainsafe's annotation drainsafe.io/maintained=<NodeMaintenance>[/<note>] (drainsafe
  maintenance done, or kubectl annotate);
- a replaced machine: the Node object deleted and registered again under the same name,
  with a new metadata.uid.

The boot ID, kubelet version and UID are recorded in the NodeMaintenance's status row of
the node when its drain ends (`Recorded`), so a new leader compares against the same values.

The annotation is a mark only when set after the drain ended: its value then is recorded
too (`Recorded.maintained`, the node read after the drain), and the annotation counts when
it names this NodeMaintenance (`<name>`, or `<name>/<anything>`) and differs from that
value. An annotation cannot say when it was set, and one put on early (kubectl annotate
before the drain finished, or left over from an earlier operation of the same name) would
otherwise uncordon the node the moment its drain ends, unmaintained. `drainsafe maintenance
done` writes `<name>/<now>` (`done_mark`), which always differs. A replaced node (a new
UID) is a new object: whatever it carries was set after the drain.

Replaced (a new UID): under bootIDChanged it counts as maintained (a new machine has booted
since), and under kubeletVersion: changed too (whatever was to change, the machine is a
new one); under kubeletVersion: <minimum> the new node must still report at least that
version (a replacement from an old image is not upgraded). The annotation and a condition
are read on whatever node carries the name now.

A node that is gone (no Node of that name) is not maintained: it stays AwaitingMaintenance
with reason NodeGone until a node of that name registers again, judged as above (deleting
the NodeMaintenance ends the wait).

Any one of the configured marks is enough (maintenance.spec.MaintainedWhen).

How long a node waits for a mark (maintainedWhen.timeoutSeconds, `wait_bound`): counted
from the `finished` time of its status row, written with AwaitingMaintenance when its drain
ended, so every leader computes the same deadline (the rest of the status resumes the same
way); past it, the node fails (MaintenanceTimedOut) and stays cordoned with drainsafe's
record, as a drain that fails does (a person, or deleting the NodeMaintenance, gives it
back). A mark seen before the deadline is checked first, and so is a mark made while no
leader ran: a node maintained is uncordoned even if the deadline has passed since.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from drainsafe.kube.objects import (
    condition,
    meta,
    parse_time,
    rfc3339,
    rfc3339_micro,
    uid_of,
)
from drainsafe.maintenance.spec import KUBELET_VERSION_CHANGED, MaintainedWhen, version_triple

MAINTAINED = "drainsafe.io/maintained"  # on a node: the NodeMaintenance its maintenance ended
# Why a node is (the first five) or is not (the last two) maintained; a status row's reason.
Why = Literal["Annotated", "Condition", "Rebooted", "KubeletUpgraded", "Replaced",
              "NodeGone", "AwaitingMaintenance"]


@dataclass(frozen=True)
class NodeSeen:
    """What the decision reads of a Node object."""

    uid: str
    boot_id: str = ""
    kubelet_version: str = ""
    maintained_for: str = ""  # the drainsafe.io/maintained annotation's value
    conditions: Mapping[str, str] | None = None  # condition type -> status


@dataclass(frozen=True)
class Recorded:
    """The node as it was when its drain ended, kept in the NodeMaintenance's status."""

    uid: str = ""
    boot_id: str = ""
    kubelet_version: str = ""
    maintained: str = ""  # the drainsafe.io/maintained annotation already there, if any

    def as_status(self) -> dict[str, str]:
        return {k: v for k, v in (("uid", self.uid), ("bootID", self.boot_id),
                                  ("kubeletVersion", self.kubelet_version),
                                  ("maintained", self.maintained)) if v}

    @staticmethod
    def of_status(row: Mapping[str, Any] | None) -> Recorded | None:
        if not row:
            return None
        return Recorded(str(row.get("uid") or ""), str(row.get("bootID") or ""),
                        str(row.get("kubeletVersion") or ""),
                        str(row.get("maintained") or ""))


def node_seen(node: Mapping[str, Any]) -> NodeSeen:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    annotations = meta(dict(node)).get("annotations") or {}
    kinds = [str(c.get("type")) for c in (node.get("status") or {}).get("conditions") or []]
    statuses = {}
    for kind in kinds:
        c = condition(dict(node), kind)
        statuses[kind] = str((c or {}).get("status") or "Unknown")
    return NodeSeen(uid=uid_of(dict(node)), boot_id=str(info.get("bootID") or ""),
                    kubelet_version=str(info.get("kubeletVersion") or ""),
                    maintained_for=str(annotations.get(MAINTAINED) or ""),
                    conditions=statuses)


def record_of(seen: NodeSeen) -> Recorded:
    return Recorded(seen.uid, seen.boot_id, seen.kubelet_version, seen.maintained_for)


def names(value: str, maintenance: str) -> bool:
    """Whether a drainsafe.io/maintained value is for this NodeMaintenance: its name, alone
    or followed by `/` and a note (a time, a ticket). A name has no `/` (a DNS subdomain)."""
    return value == maintenance or value.startswith(maintenance + "/")


def stale_mark(recorded: Recorded | None, when: MaintainedWhen, maintenance: str
               ) -> str | None:
    """The row's message when the node already carried this operation's mark as its drain
    ended: that mark does not count, and a person waiting for the node should know why."""
    if not when.annotation or recorded is None or not names(recorded.maintained, maintenance):
        return None
    return (f"{MAINTAINED}={recorded.maintained} was set before the drain ended and does not "
            f"count; mark again (drainsafe maintenance done)")


def done_mark(maintenance: str, now: float, recorded: str = "") -> str:
    """What `drainsafe maintenance done` writes: the name and the time of the mark, never
    the value recorded at the drain's end (`recorded`), so it always counts."""
    mark = f"{maintenance}/{rfc3339(now)}"
    return mark if mark != recorded else f"{maintenance}/{rfc3339_micro(now)}"


def _version_ok(want: str, now: str, recorded: Recorded | None, replaced: bool) -> bool:
    if want == KUBELET_VERSION_CHANGED:
        if replaced:
            return True
        return recorded is not None and bool(recorded.kubelet_version) and bool(now) \
            and now != recorded.kubelet_version
    have, least = version_triple(now), version_triple(want)
    return have is not None and least is not None and have >= least


def maintained(node: NodeSeen | None, recorded: Recorded | None, when: MaintainedWhen,
               maintenance: str) -> tuple[bool, Why]:
    """Whether the node's maintenance is done, and why (or why not) in a few words.

    `recorded` is None when nothing was recorded (a status from before this field, or
    the node was gone when its drain ended): then no change can be told, and only the
    marks that need no record (annotation, condition, a minimum version) count. The
    annotation counts only if it differs from the value recorded (set after the drain)."""
    if node is None:
        return False, "NodeGone"
    replaced = recorded is not None and bool(recorded.uid) and node.uid != recorded.uid
    if when.annotation and names(node.maintained_for, maintenance) and (
            recorded is None or replaced or node.maintained_for != recorded.maintained):
        return True, "Annotated"
    mark = when.node_condition
    if mark is not None and (node.conditions or {}).get(mark.type) == mark.status:
        return True, "Condition"
    if when.boot_id_changed:
        if replaced:
            return True, "Replaced"
        if recorded is not None and recorded.boot_id and node.boot_id \
                and node.boot_id != recorded.boot_id:
            return True, "Rebooted"
    if when.kubelet_version is not None and _version_ok(
            when.kubelet_version, node.kubelet_version, recorded, replaced):
        return True, "Replaced" if replaced else "KubeletUpgraded"
    return False, "AwaitingMaintenance"


def marks_text(when: MaintainedWhen, maintenance: str) -> str:
    """What marks a node maintained, for people (the node table, the Events)."""
    marks = [f"{MAINTAINED}={maintenance}"] if when.annotation else []
    if when.node_condition is not None:
        marks.append(f"condition {when.node_condition.type}={when.node_condition.status}")
    if when.boot_id_changed:
        marks.append("a new boot ID")
    if when.kubelet_version == KUBELET_VERSION_CHANGED:
        marks.append("another kubelet version")
    elif when.kubelet_version is not None:
        marks.append(f"kubelet >= {when.kubelet_version}")
    text = " or ".join(marks)
    if when.timeout_seconds is not None:
        text += f"; Failed if unmarked {when.timeout_seconds}s after its drain"
    return text


@dataclass(frozen=True)
class WaitBound:
    """Until when a drained node waits for its mark (None: as long as it takes)."""

    deadline: float | None = None  # Unix seconds
    since: float | None = None  # when the wait began (the drain finished)
    timeout_seconds: int | None = None

    def left(self, now: float) -> float | None:
        """Seconds until the deadline (0 once past); None when there is none."""
        return None if self.deadline is None else max(self.deadline - now, 0.0)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def message(self) -> str:
        """The failed row's message: what happened, and what the node is left as."""
        return (f"not marked maintained within maintainedWhen.timeoutSeconds "
                f"({self.timeout_seconds}s) of its drain; left cordoned and recorded")


def wait_bound(finished: str | None, started_or_now: float,
               when: MaintainedWhen) -> WaitBound:
    """The deadline of a node's wait for its mark: maintainedWhen.timeoutSeconds after
    `finished`, the row's RFC 3339 time. The API server keeps a metav1.Time in whole
    seconds (the fraction dropped: kube.objects.rfc3339), so the wait is counted from the
    end of that second: a node never fails before it has waited the whole timeout, and at
    most a second after. A row without a readable `finished` (an older drainsafe's) counts
    from `started_or_now`: its `started`, or when a leader first waits on it."""
    if when.timeout_seconds is None:
        return WaitBound()
    since = parse_time(finished)
    if since is None:
        since = started_or_now
    elif finished is not None and "." not in finished:
        since += 1.0
    return WaitBound(since + when.timeout_seconds, since, when.timeout_seconds)
