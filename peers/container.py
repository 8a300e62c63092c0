"""A pod's processes, all of them, as the container runtime would kill them.

The runtime stops a container by killing every process in its cgroup. Here a pod is a
process tree on the test's own machine, and three things hide parts of that tree:
- a process whose parent exits is re-parented, out of the tree under the pod's main
  process (to init, or to the nearest "child subreaper");
- drainsafe run starts its child in a session of its own (setsid in
  drainsafe.lifetime `own_session_dying_with_parent`), so the server is not in the session
  of the pod's main process;
- vLLM names its processes with setproctitle (`VLLM::EngineCore`, `VLLM::Worker`;
  vllm/utils/system_utils.py `set_process_title` at 0.32.0), which overwrites the memory
  that /proc/PID/environ reads: a marker in the environment is gone from exactly those
  processes. (The suite marked its processes that way and leaked `VLLM::Worker`s of
  ~935 MB each.)

So the suite's process makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux
3.4): every orphan of a pod is re-parented to it and stays its descendant. A pod is its main
process, every descendant of it, and every descendant of this process in a session that a
member of the pod was seen in (sessions are remembered, so a member orphaned later is still
known). Kills only ever reach this process's descendants: a pid (or session id) reused by
another program on the machine is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    session: int
    zombie: bool


def processes() -> dict[int, Process]:
    """Every process on the machine, from /proc/PID/stat."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The name, in parentheses, may hold spaces and parentheses: fields follow the last ")".
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = Process(pid=int(entry.name), ppid=int(fields[1]),
                                         session=int(fields[3]), zombie=fields[0] in "ZX")
    return table


def descendants(table: dict[int, Process], roots: set[int]) -> set[int]:
    """The roots that exist and every process under them."""
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found = {pid for pid in roots if pid in table}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def become_subreaper() -> None:
    """Orphans of everything this process starts are re-parented to it, not to init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


class PodProcesses:
    """The processes of one pod, found and killed as described above."""

    def __init__(self, main: int) -> None:
        self.main = main
        self.sessions: set[int] = set()

    def members(self, table: dict[int, Process] | None = None) -> set[int]:
        table = processes() if table is None else table
        ours = descendants(table, {os.getpid()}) - {os.getpid()}
        found = descendants(table, {self.main}) & ours
        self.sessions |= {table[pid].session for pid in found}
        found |= {pid for pid in ours if table[pid].session in self.sessions}
        # A session seen now may hold processes whose own descendants are elsewhere.
        return descendants(table, found) & ours

    def remember(self) -> None:
        """Note the sessions of the pod's processes now (call while they run)."""
        self.members()

    def kill(self, timeout: float = 10.0) -> set[int]:
        """SIGKILL every member until none is left alive; reap the zombies that are this
        process's children (orphans re-parented here), except the main process, whose
        Popen reaps it. Returns the pids still alive after `timeout` (none, normally)."""
        deadline = time.monotonic() + timeout
        while True:
            table = processes()
            members = self.members(table)
            live = {pid for pid in members if not table[pid].zombie}
            if not live or time.monotonic() > deadline:
                break
            for pid in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        reap_orphans(members - {self.main})
        return live


def reap_orphans(pids: set[int]) -> None:
    """Collect the exit status of those of `pids` that are this process's dead children
    (orphans re-parented here), so no zombie is left behind."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def kill_all_descendants(timeout: float = 10.0) -> set[int]:
    """The last resort at the session's end: whatever this process started and is still
    there, orphans included (they are re-parented here)."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        table = processes()
        found = descendants(table, {me}) - {me}
        live = {pid for pid in found if not table[pid].zombie}
        if not live or time.monotonic() > deadline:
            break
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    reap_orphans(found)
    return live
