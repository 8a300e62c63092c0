"""Grouped workloads in the engine (the rules are drainsafe.simulate.groups, after
kubernetes-sigs/lws v0.10.0): slots, groups and their serving spells, gang placement, a
group deleted whole or a worker alone, and a make-before-break move of one group.

A slot is a replica's identity (the group index), a group one incarnation of it, all of
its pods together. A move (drainsafe's src/drainsafe/drain/groupsurge.py, or a generic
surge tool): a stand-in group first; once it serves, evict the group's pods on drained
nodes; once the group serves again (reloaded), scale back down: the stand-in goes.
Under the drainsafe strategy a move belongs to a step (node, workload): its stand-ins must
all serve before any eviction, and its moves all be reloaded before the scale-down.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from drainsafe.simulate.events import GONE, READY
from drainsafe.simulate.groups import GroupLog, place_group, serves
from drainsafe.simulate.pods import (
    DELETED,
    PENDING,
    READY_STATE,
    STARTING,
    TERMINATING,
    Pods,
)
from drainsafe.simulate.scenario import Scenario

_SURGING, _EVICTING, _RELOADING, _RELOADED = range(4)


@dataclass
class _Move:
    """A make-before-break move of one group: stand-in first, then evict, then reload."""

    slot: int
    standin: int
    pods: list[int]
    """The group's pods on drained nodes still to evict."""
    old: int
    """The incarnation being moved."""
    step: tuple[int, int] | None
    """drainsafe: (node, workload), whose stand-ins must all be Ready first."""
    phase: int = _SURGING



class Groups(Pods):
    """The grouped workloads' slots, groups and moves."""

    def __init__(self, s: Scenario) -> None:
        super().__init__(s)
        # Grouped workloads (drainsafe.simulate.groups): a slot is a replica's identity
        # (the group index), a group one incarnation of it, all of its pods together.
        self.size = [w.group_size for w in s.workloads]
        self.g_w: list[int] = []
        self.g_slot: list[int] = []
        self.g_pods: list[list[int]] = []
        self.g_state: list[int] = []
        self.g_ready: list[int] = []  # its pods Ready
        self.g_live: list[int] = []  # its pods not yet gone, once it is deleted
        self.g_spell: list[int] = []  # its current serving spell
        # Serving spells (drainsafe.simulate.groups.GroupLog).
        self.sp_group: list[int] = []
        self.sp_from: list[float] = []
        self.sp_until: list[float] = []
        self.slot_w: list[int] = []
        self.slot_group: list[int] = []
        self.slot_removed: list[bool] = []
        self.slot_standin: list[bool] = []
        # Make before break for groups: per drained slot, its move; per stand-in slot, the
        # slot it stands in for; per drainsafe step (node, workload), the slots it moves.
        self.moves: dict[int, _Move] = {}
        self.standin_for: dict[int, int] = {}
        self.group_steps: dict[tuple[int, int], list[int]] = {}  # stand-ins to be Ready
        self.step_moves: dict[tuple[int, int], list[int]] = {}  # moves to finish together

    def new_slot(self, w: int, *, standin: bool) -> int:
        self.slot_w.append(w)
        self.slot_group.append(-1)
        self.slot_removed.append(False)
        self.slot_standin.append(standin)
        return len(self.slot_w) - 1

    def new_group(self, slot: int) -> int:
        """A new incarnation of `slot`: all of its pods Pending."""
        w = self.slot_w[slot]
        g = len(self.g_w)
        pods = [self.new_pod(w) for _ in range(self.size[w])]
        for p in pods:
            self.pod_group[p] = g
        self.g_w.append(w)
        self.g_slot.append(slot)
        self.g_pods.append(pods)
        self.g_state.append(PENDING)
        self.g_ready.append(0)
        self.g_live.append(0)
        self.g_spell.append(-1)
        self.slot_group[slot] = g
        return g

    def is_leader(self, p: int) -> bool:
        return self.g_pods[self.pod_group[p]][0] == p

    def place_initial_groups(self, w: int) -> None:
        wl = self.s.workloads[w]
        for _ in range(wl.replicas):
            g = self.new_group(self.new_slot(w, standin=False))
            nodes = place_group(self.open_nodes, self.free, wl.gpus, wl.group_size)
            if nodes is None:
                raise ValueError(f"workload {wl.name}: groups do not pack onto the fleet "
                                 f"({wl.group_size} nodes with {wl.gpus} GPUs free each)")
            for p, node in zip(self.g_pods[g], nodes, strict=True):
                self.place(p, node)
                self.pod_state[p] = READY_STATE
            self.ready_pods[w] += wl.group_size
            self.g_ready[g] = wl.group_size
            self.g_state[g] = READY_STATE
            self.g_spell[g] = len(self.sp_from)
            self.sp_group.append(g)
            self.sp_from.append(0.0)
            self.sp_until.append(math.nan)
            self.ready[w] += 1
            self.routed_by[self.g_pods[g][0]] = self.all_consumers

    def place_pending_group(self, g: int) -> bool:
        """The group's Pending pods onto distinct nodes at once, or none of them (a new
        group: all of them; restartPolicy None: a recreated worker, away from the nodes
        of its group's other pods)."""
        w = self.g_w[g]
        gpus = self.s.workloads[w].gpus
        pods = [p for p in self.g_pods[g] if self.pod_state[p] == PENDING]
        taken = {self.pod_node[p] for p in self.g_pods[g] if self.pod_state[p] != PENDING}
        nodes = place_group(self.open_nodes, self.free, gpus, len(pods), avoid=taken)
        if nodes is None:
            return False
        sampler = self.startup[w]
        for p, node in zip(pods, nodes, strict=True):
            self.place(p, node)
            self.pod_state[p] = STARTING
            self.push(self.now + sampler.next(), READY, p)
        if self.g_state[g] == PENDING:
            self.g_state[g] = STARTING
        return True

    def group_pod_ready(self, p: int) -> None:
        g = self.pod_group[p]
        w = self.g_w[g]
        if self.is_leader(p):
            # The Service selects leaders by their labels: consumers learn of a Ready
            # leader whether or not its workers are Ready yet.
            for changes, sampler in zip(self.route_changes, self.prop_add, strict=True):
                heapq.heappush(changes, (self.now + sampler.next(), p, 1))
        self.g_ready[g] += 1
        if not serves(self.g_ready[g], self.size[w], self.g_state[g] == TERMINATING):
            return
        self.g_state[g] = READY_STATE
        self.ready[w] += 1
        self.record_ready()
        self.g_spell[g] = len(self.sp_from)
        self.sp_group.append(g)
        self.sp_from.append(self.now)
        self.sp_until.append(math.nan)
        self.group_serving(g)

    def stop_serving(self, g: int) -> None:
        if self.g_state[g] != READY_STATE:
            return
        self.ready[self.g_w[g]] -= 1
        self.record_ready()
        self.sp_until[self.g_spell[g]] = self.now

    def delete_group(self, g: int) -> None:
        """Every pod of the group goes (one evicted, the rest deleted by the LWS
        controller, no budget asked); the leader's traffic as for any deleted pod."""
        state = self.g_state[g]
        if state in (TERMINATING, DELETED):
            return
        self.catch_up()  # before any pod of it stops being Ready
        w = self.g_w[g]
        self.stop_serving(g)
        self.g_state[g] = TERMINATING
        close = self.times[w].close
        live = 0
        for p in self.g_pods[g]:
            pod_state = self.pod_state[p]
            if pod_state == DELETED:
                continue
            live += 1
            if pod_state == TERMINATING:
                continue  # a worker already going (restartPolicy None)
            self.matched[w] -= 1
            if pod_state == PENDING:
                self.pod_state[p] = DELETED
                self.pending_of[w] -= 1
                live -= 1
                continue
            self.pod_state[p] = TERMINATING
            if pod_state == READY_STATE:
                self.ready_pods[w] -= 1
                if self.is_leader(p):
                    self.push(self.now + self.serving_deleted(p, w), GONE, p)
                    continue
            self.push(self.now + close, GONE, p)
        self.g_live[g] = live
        move = self.moves.get(self.g_slot[g])
        if move is not None and move.old == g:
            move.pods.clear()
            self.reloading(move)
        if live == 0:
            self.group_gone(g)

    def delete_group_pod(self, p: int) -> None:
        """restartPolicy None: a worker goes alone; its group stops serving until the
        worker's StatefulSet has recreated it and it is Ready."""
        g = self.pod_group[p]
        w = self.g_w[g]
        was_ready = self.pod_state[p] == READY_STATE
        self.pod_state[p] = TERMINATING
        self.matched[w] -= 1
        if was_ready:
            self.ready_pods[w] -= 1
            self.g_ready[g] -= 1
        self.stop_serving(g)
        if self.g_state[g] == READY_STATE:
            self.g_state[g] = STARTING
        self.push(self.now + self.times[w].close, GONE, p)
        move = self.moves.get(self.g_slot[g])
        if move is not None and move.old == g and p in move.pods:
            move.pods.remove(p)
            if not move.pods:
                self.reloading(move)

    def group_pod_gone(self, p: int) -> None:
        g = self.pod_group[p]
        if self.g_state[g] == TERMINATING:
            self.g_live[g] -= 1
            if self.g_live[g] == 0:
                self.group_gone(g)
            return
        # restartPolicy None: the worker StatefulSet recreates it under its name, now.
        r = self.new_pod(self.g_w[g])
        self.pod_group[r] = g
        self.g_pods[g][self.g_pods[g].index(p)] = r
        self.pending.append(r)
        self.schedule_pending()

    def group_gone(self, g: int) -> None:
        """The last pod of the group is gone: the set recreates it under the same names."""
        self.g_state[g] = DELETED
        slot = self.g_slot[g]
        if self.slot_removed[slot] or self.slot_group[slot] != g:
            return
        new = self.new_group(slot)
        self.pending.extend(self.g_pods[new])
        self.schedule_pending()

    def surge_group(self, p: int, step: tuple[int, int] | None) -> None:
        """Make before break for the group of pod p: a stand-in group first (one per
        group, even when it has pods on several drained nodes)."""
        g = self.pod_group[p]
        slot = self.g_slot[g]
        move = self.moves.get(slot)
        if move is None:
            standin = self.new_slot(self.g_w[g], standin=True)
            self.pending.extend(self.g_pods[self.new_group(standin)])
            self.moves[slot] = _Move(slot=slot, standin=standin, pods=[p], old=g, step=step)
            self.standin_for[standin] = slot
            if step is not None:
                self.group_steps.setdefault(step, []).append(slot)
                self.step_moves.setdefault(step, []).append(slot)
            return
        if g != move.old:
            # Its recreation landed on a node drained since: the stand-in still serves.
            move.old, move.pods = g, [p]
            self.evict_old(move)
        elif p not in move.pods:
            move.pods.append(p)
            if move.phase != _SURGING:
                move.phase = _EVICTING
                self.try_evict(p)

    def slot_serving(self, slot: int) -> bool:
        return self.g_state[self.slot_group[slot]] == READY_STATE

    def group_serving(self, g: int) -> None:
        slot = self.g_slot[g]
        moved = self.standin_for.get(slot)
        if moved is not None and self.moves[moved].phase == _SURGING:
            self.standin_ready(self.moves[moved])
        move = self.moves.get(slot)
        if move is not None:
            self.maybe_reloaded(move)

    def standin_ready(self, move: _Move) -> None:
        if move.step is None:
            self.evict_old(move)
            return
        slots = self.group_steps.get(move.step, [])
        waiting = [self.moves[s] for s in slots
                   if s in self.moves and self.moves[s].phase == _SURGING]
        if not all(self.slot_serving(m.standin) for m in waiting):
            return
        self.group_steps.pop(move.step, None)
        for m in waiting:
            self.evict_old(m)

    def evict_old(self, move: _Move) -> None:
        move.phase = _EVICTING
        move.pods = [p for p in move.pods if self.pod_state[p] in (STARTING, READY_STATE)]
        if not move.pods:  # gone meanwhile (its group went for another reason)
            self.reloading(move)
            return
        for p in list(move.pods):
            self.try_evict(p)

    def reloading(self, move: _Move) -> None:
        move.phase = _RELOADING
        self.maybe_reloaded(move)

    def maybe_reloaded(self, move: _Move) -> None:
        """The moved group serves again: scale back down (drainsafe: once every group of
        its step does, as it restores a workload's recorded replicas in one step)."""
        if move.phase != _RELOADING or not self.slot_serving(move.slot):
            return
        move.phase = _RELOADED
        if move.step is None:
            self.finish_move(move)
            return
        slots = self.step_moves.get(move.step, [])
        moves = [self.moves[s] for s in slots if s in self.moves]
        if all(m.phase == _RELOADED for m in moves):
            self.step_moves.pop(move.step, None)
            for m in moves:
                self.finish_move(m)
            self.step_finished(move.step)

    def finish_move(self, move: _Move) -> None:
        """Scale back down: the stand-in goes."""
        if self.moves.get(move.slot) is not move:
            return
        self.moves.pop(move.slot, None)
        self.standin_for.pop(move.standin, None)
        self.remove_slot(move.standin)

    def remove_slot(self, slot: int) -> None:
        self.slot_removed[slot] = True
        inner = self.moves.get(slot)
        if inner is not None:  # a stand-in that was itself being moved
            self.finish_move(inner)
        self.delete_group(self.slot_group[slot])

    def group_log(self) -> GroupLog:
        if not self.sp_group:
            return GroupLog.empty()
        return GroupLog(
            workload=np.array([self.g_w[g] for g in self.sp_group], dtype=np.int64),
            group=np.array(self.sp_group, dtype=np.int64),
            standin=np.array([self.slot_standin[self.g_slot[g]] for g in self.sp_group],
                             dtype=np.bool_),
            serving_from=np.array(self.sp_from), serving_until=np.array(self.sp_until))

    def step_finished(self, key: tuple[int, int]) -> None:
        """drainsafe: step `key`'s surge is over (simulate.strategies)."""
        raise NotImplementedError

    def try_evict(self, p: int) -> None:
        """Evict pod p through its budget or wait for it (simulate.strategies)."""
        raise NotImplementedError
