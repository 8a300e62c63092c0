"""What each drain strategy does with the pods of a node, and the eviction itself (the
whole model and its sources: drainsafe.simulate.lifecycle's docstring).

- kubectl: evict every pod on the node at once (kubectl drain; a refused eviction retried
  every `eviction_retry` seconds, 5 s as kubectl drain does); the ReplicaSet replaces a
  deleted pod at once.
- drainsafe (src/drainsafe/drain/execute.py, surgefirst.py): one step per (node, workload):
  a new pod for each of its pods on the node, then, once all of them are Ready, evict the
  old ones as fast as the budget allows (watching the budget's status, not a timer); a
  step of a StatefulSet or LeaderWorkerSet holds its workload's lock (simulate.surgelock)
  until its old pods are gone (groups: restored), as surgefirst.drain_workload and
  groupsurge.drain_groups hold theirs. A Deployment's surge is shared by the nodes
  draining it (drain.sharedsurge, simulate.surgelock SharedSurges): a node joins on room,
  waits until base pods are Ready off its node, then evicts each old pod while the
  workload's Ready pods minus that pod stay at or above base (the counting gate); its part
  leaves with its last eviction. `upgrade.surge_sharing: lock` gives Deployments the lock
  too (the engine before issue 30), for comparison.
- surge: make before break per pod: evict a pod once its own replacement is Ready.

Every eviction goes through the PodDisruptionBudget (drainsafe.pdb, the disruption
controller's arithmetic; unhealthyPodEvictionPolicy for a pod not Ready).
"""

from __future__ import annotations

import math

from drainsafe.pdb import status, unhealthy_pod_may_be_evicted
from drainsafe.simulate.events import EVICT, GONE
from drainsafe.simulate.groupmoves import Groups
from drainsafe.simulate.groups import disruptions_needed, place_group
from drainsafe.simulate.pods import (
    DELETED,
    PENDING,
    READY_STATE,
    STARTING,
    TERMINATING,
)
from drainsafe.simulate.scenario import Scenario
from drainsafe.simulate.surgelock import SharedSurges, SurgeLocks, first_fit


def needs_fit(needs: tuple[tuple[int, int], ...], free: list[int], order: list[int]) -> bool:
    """Whether `needs` (Strategies.surge_needs) fit on `free` over `order`, first fit;
    takes what it places (a group on nodes of its own, simulate.groups place_group)."""
    for gpus, pods in needs:
        if pods == 1:
            if not first_fit(free, order, gpus, 1):
                return False
            continue
        nodes = place_group(order, free, gpus, pods)
        if nodes is None:
            return False
        for n in nodes:
            free[n] -= gpus
    return True


class Strategies(Groups):
    """The strategies' eviction decisions."""

    def __init__(self, s: Scenario) -> None:
        super().__init__(s)
        self.waiters: list[list[int]] = [[] for _ in s.workloads]
        # drainsafe strategy: the surge of one workload on one node is one step: its old
        # pods are evicted once every new pod of the step is Ready.
        self.step_old: dict[tuple[int, int], list[int]] = {}
        self.step_new: dict[tuple[int, int], set[int]] = {}
        self.step_of: dict[int, tuple[int, int]] = {}  # new pod -> its step
        # One surge of a workload at a time (simulate.surgelock): a step holds its
        # workload's lock until its old pods are gone (groups: until restored).
        self.locks = SurgeLocks()
        self.step_left: dict[tuple[int, int], int] = {}  # old pods not yet gone
        self.old_step: dict[int, tuple[int, int]] = {}  # old pod -> its step
        # A node's drain is done when its steps are (groups: restored), not when it is
        # empty: NodeDrainer.run returns once every workload's surge has.
        self.node_steps: dict[int, int] = {}  # steps holding a lock, per node
        self.awaiting_steps: set[int] = set()  # empty nodes whose steps are not done
        # Deployments' surges shared by their nodes (simulate.surgelock SharedSurges;
        # None under upgrade.surge_sharing: lock, and off the drainsafe engine).
        up = s.upgrade
        self.shared = (SharedSurges() if up.strategy == "drainsafe"
                       and up.surge_sharing == "shared" else None)
        self.gated: list[list[int]] = [[] for _ in s.workloads]  # old pods the gate holds
        self.armed: set[tuple[int, int]] = set()  # holders that saw base Ready off the node
        self.part_left: dict[tuple[int, int], int] = {}  # a part's old pods not evicted
        self.shared_steps: set[tuple[int, int]] = set()  # shared steps not yet done

    def drain_pods(self, node: int, pods: list[int]) -> None:
        """The drain of a cordoned node begins: what the strategy does with its pods."""
        strategy = self.s.upgrade.strategy
        if strategy == "kubectl":
            for p in pods:
                self.try_evict(p)
        elif strategy == "drainsafe":
            # One step per workload: all of its pods here get a new pod at once (a starting
            # one too: the drain counts it in the surge), once the node holds the
            # workload's lock; a workload another node surges waits for it.
            held: dict[int, None] = {}
            # Free GPUs as this node's joins take them (join on room).
            room = list(self.free) if self.shared is not None else []
            for p in pods:
                if self.pod_state[p] in (TERMINATING, DELETED):
                    continue
                w = self.pod_w[p]
                if w not in held:
                    if not self.take_surge(w, node, room):
                        continue
                    held[w] = None
                    self.node_steps[node] = self.node_steps.get(node, 0) + 1
                    if self.sharing(w):
                        self.shared_steps.add((node, w))
                self.surge_pod(node, p)
            self.schedule_pending()
            for w in held:
                self.maybe_step_done((node, w))
                if self.sharing(w):
                    self.release_gated(w)
        else:
            # Make before break for every pod on the node, a starting one included: evicting
            # it now would only be refused by the budget and retried once it serves.
            for p in pods:
                if self.pod_group[p] >= 0:
                    if self.pod_state[p] not in (TERMINATING, DELETED):
                        self.surge_group(p, None)
                    continue
                r = self.new_pod(self.pod_w[p], replaces=p)
                self.replaced_by[p] = r
                self.pending.append(r)
            self.schedule_pending()

    def sharing(self, w: int) -> bool:
        """Workload w's surge is shared (a Deployment's, unless upgrade.surge_sharing is
        lock)."""
        return self.shared is not None and self.size[w] == 1

    def take_surge(self, w: int, node: int, room: list[int]) -> bool:
        """drainsafe: `node` may surge workload w now (it holds the lock, or a part of the
        shared surge), or it waits (in the lock's queue, or to join)."""
        if self.shared is None or not self.sharing(w):
            return self.locks.acquire(w, node, self.now)
        if self.shared.holds(w, node):
            return True
        part = self.part_of(node, w)
        return self.shared.join(w, node, part, self.join_fits(room, w, part))

    def join_fits(self, room: list[int], w: int, part: int) -> bool:
        """Its `part` new pods and w's still unplaced ones fit on `room` now, first fit
        (sharedsurge._fits); takes that room when they do."""
        return first_fit(room, self.open_nodes, self.s.workloads[w].gpus,
                         part + self.pending_of[w])

    def part_of(self, node: int, w: int) -> int:
        """New pods w's surge for `node` needs: one per pod of w there not going."""
        return sum(1 for p in self.node_pods[node]
                   if self.pod_w[p] == w and self.pod_state[p] not in (TERMINATING, DELETED))

    def gate_open(self, p: int) -> bool:
        """The counting gate (drain.parts.may_evict): w's Ready pods minus p stay at or
        above base."""
        w = self.pod_w[p]
        return SharedSurges.may_evict(self.ready_pods[w], self.s.workloads[w].replicas,
                                      serving=self.pod_state[p] == READY_STATE)

    def armed_now(self, key: tuple[int, int]) -> bool:
        """The holder `key` has seen base pods Ready off its node (surgefirst._wait_surge,
        once): its evictions may begin, each through the gate."""
        if key in self.armed:
            return True
        node, w = key
        here = sum(1 for p in self.node_pods[node]
                   if self.pod_w[p] == w and self.pod_state[p] == READY_STATE)
        if self.ready_pods[w] - here < self.s.workloads[w].replicas:
            return False
        self.armed.add(key)
        return True

    def release_gated(self, w: int) -> None:
        """Shared surge: the holders that may begin evicting hand their old pods to the
        gate, and every old pod the gate holds is tried again, in order (one decision and
        eviction at a time, as under the engine's lock per workload)."""
        assert self.shared is not None
        for node in self.shared.holders(w):
            key = (node, w)
            if key in self.step_old and self.armed_now(key):
                self.gated[w].extend(self.step_old.pop(key))
        gated = self.gated[w]
        if gated:
            self.gated[w] = []
            for old in gated:
                self.try_evict(old)

    def evicted_from_part(self, p: int) -> None:
        """An old pod of a shared step was evicted: its part comes down by one, and leaves
        with the last one; the nodes waiting to join try again."""
        key = self.old_step.get(p)
        if key is None or key not in self.part_left:
            return
        left = self.part_left[key] - 1
        if left:
            self.part_left[key] = left
            return
        self.part_done(key)

    def part_done(self, key: tuple[int, int]) -> None:
        assert self.shared is not None
        node, w = key
        self.part_left.pop(key, None)
        self.armed.discard(key)
        rejoin = self.shared.leave(w, node)
        if rejoin:
            self.retry_joins(w, rejoin)

    def retry_joins(self, w: int, nodes: list[int]) -> None:
        """A part of w's shared surge left: the nodes waiting to join try again, in order
        (one whose new pods do not fit waits on; a later one that fits joins)."""
        assert self.shared is not None
        for node in nodes:
            part = self.part_of(node, w)
            if self.shared.join(w, node, part, self.join_fits(list(self.free), w, part)):
                self.start_step(node, w)

    def shared_wedge(self) -> str | None:
        """Why a shared surge stopped: its holders' evictions wait on the gate for new pods
        that have no room, while the room would come back only from the holders."""
        if self.shared is None:
            return None
        for w, parts in self.shared.parts.items():
            held = (sum(len(self.step_old.get((n, w), ())) for n in parts)
                    + len(self.gated[w]))
            pending = sum(1 for p in self.pending
                          if self.pod_w[p] == w and self.pod_state[p] == PENDING)
            # One holder short of room is the lock's wedge too (no room at all): said below.
            if held and pending and len(parts) > 1:
                wl = self.s.workloads[w]
                waiting = len(self.shared.waiting.get(w, ()))
                return (f"workload {wl.name}: its surge is shared by {len(parts)} nodes and "
                        f"their evictions wait for each other's new pods, {pending} of which "
                        f"have no room (Pending), so {held} old pods never go"
                        + (f" and {waiting} nodes wait to join" if waiting else ""))
        return None

    def surge_pod(self, node: int, p: int) -> None:
        """drainsafe: pod p joins its workload's step on `node`: a new pod (or a stand-in
        group) for it."""
        key = (node, self.pod_w[p])
        if self.pod_group[p] >= 0:
            self.surge_group(p, key)
            return
        r = self.new_pod(self.pod_w[p], replaces=p)
        self.replaced_by[p] = r
        self.step_old.setdefault(key, []).append(p)
        self.step_new.setdefault(key, set()).add(r)
        self.step_of[r] = key
        self.step_left[key] = self.step_left.get(key, 0) + 1
        self.old_step[p] = key
        if self.shared is not None and self.sharing(key[1]):
            self.part_left[key] = self.part_left.get(key, 0) + 1
        self.pending.append(r)

    def start_step(self, node: int, w: int) -> None:
        """`node` holds workload w's lock (or a part of its shared surge) now, after
        waiting: surge its pods there."""
        self.node_steps[node] = self.node_steps.get(node, 0) + 1
        shared = self.shared is not None and self.sharing(w)
        if shared:
            self.shared_steps.add((node, w))
        for p in sorted(self.node_pods[node]):
            if self.pod_w[p] == w and self.pod_state[p] not in (TERMINATING, DELETED):
                self.surge_pod(node, p)
        if shared and (node, w) not in self.part_left:
            self.part_done((node, w))  # nothing left to surge: the part holds nothing
        self.schedule_pending()
        self.maybe_step_done((node, w))
        if shared:
            self.release_gated(w)

    def maybe_step_done(self, key: tuple[int, int]) -> None:
        """A step with nothing left to wait for (no pod of its own left, no group move)
        gives the lock back."""
        if key not in self.step_left and key not in self.step_moves:
            self.step_finished(key)

    def step_finished(self, key: tuple[int, int]) -> None:
        """The surge of step `key` is over (its old pods gone, its groups restored): the
        next node waiting for the workload surges it (shared: its part left already, with
        its last eviction)."""
        node, w = key
        nxt = None
        if self.shared is not None and self.sharing(w):
            if key not in self.shared_steps:
                return
            self.shared_steps.discard(key)
            self.step_new.pop(key, None)
        else:
            if self.locks.holder.get(w) != node:
                return
            nxt = self.locks.release(w, self.now)
        self.node_steps[node] -= 1
        if not self.node_steps[node]:
            del self.node_steps[node]
            if node in self.awaiting_steps:
                self.awaiting_steps.discard(node)
                self.node_drained(node)
        if nxt is not None:
            self.start_step(nxt, w)

    def node_drained(self, node: int) -> None:
        """The node's drain is done: its maintenance begins (simulate.lifecycle)."""
        raise NotImplementedError

    def on_gone(self, p: int) -> None:
        super().on_gone(p)
        if not self.old_step:
            return
        key = self.old_step.pop(p, None)
        if key is None:
            return
        left = self.step_left[key] - 1
        if left:
            self.step_left[key] = left
            return
        del self.step_left[key]
        self.step_finished(key)

    def surge_fits(self, node: int, free: list[int], order: list[int]) -> bool:
        """Whether what `node`'s surge still needs fits on `free` over `order`, first fit;
        takes what it places."""
        return needs_fit(self.surge_needs(node), free, order)

    def surge_needs(self, node: int) -> tuple[tuple[int, int], ...]:
        """What `node`'s surge still needs, in order: (GPUs, pods) for a new pod per pod
        not going and not yet replaced (pods 1), a stand-in group per group not already
        moved (pods: the group's size, each its own node)."""
        out: list[tuple[int, int]] = []
        groups: set[int] = set()
        for p in sorted(self.node_pods[node]):
            if self.pod_state[p] in (TERMINATING, DELETED):
                continue
            if self.replaced_by.get(p, -1) >= 0:
                continue  # its new pod exists: placed, or Pending and counted as such
            wl = self.s.workloads[self.pod_w[p]]
            g = self.pod_group[p]
            if g < 0:
                out.append((wl.gpus, 1))
                continue
            if g in groups or self.g_slot[g] in self.moves:
                continue
            groups.add(g)
            out.append((wl.gpus, wl.group_size))
        return tuple(out)

    def surge_blocked(self, node: int) -> tuple[bool, bool]:
        """What drainsafe's preflight of `node` finds now: (a workload there is surged for
        another node since before now, no room for every new pod its surge needs). Room
        is first fit over the schedulable nodes' free GPUs, one stand-in group per group
        not already moved."""
        free = list(self.free)
        order = list(self.open_nodes)
        owned = False
        groups: set[int] = set()
        room = True
        for p in sorted(self.node_pods[node]):
            if self.pod_state[p] in (TERMINATING, DELETED):
                continue
            w = self.pod_w[p]
            owned = owned or self.locks.owned_by_other(w, node, self.now)
            if not room:
                continue
            wl = self.s.workloads[w]
            g = self.pod_group[p]
            if g >= 0:
                if g in groups or self.g_slot[g] in self.moves:
                    continue
                groups.add(g)
                nodes = place_group(order, free, wl.gpus, wl.group_size)
                if nodes is None:
                    room = False
                    continue
                for n in nodes:
                    free[n] -= wl.gpus
                continue
            for n in order:
                if free[n] >= wl.gpus:
                    free[n] -= wl.gpus
                    break
            else:
                room = False
        return owned, not room

    def step_ready(self, r: int) -> None:
        """drainsafe: a new pod is Ready; when its whole step is, evict the step's old pods
        (the budget decides how many go now; the rest wait for it). Shared: any pod of the
        workload Ready may let a holder begin, and the gate decide again."""
        if self.shared is not None and self.sharing(self.pod_w[r]):
            key = self.step_of.pop(r, None)
            if key is not None:
                self.step_new.get(key, set()).discard(r)
            self.release_gated(self.pod_w[r])
            return
        key = self.step_of.get(r)
        if key is None:
            old = self.pod_replaces[r]
            if old >= 0:
                self.try_evict(old)
            return
        if any(self.pod_state[n] != READY_STATE for n in self.step_new[key]):
            return
        for n in self.step_new.pop(key):
            self.step_of.pop(n, None)
        for old in self.step_old.pop(key):
            self.try_evict(old)

    def evictable(self, p: int) -> bool:
        w = self.pod_w[p]
        spec = self.s.workloads[w].pdb
        if spec is None:
            return True
        # Make before break scales the workload up by its replacements in progress, and the
        # disruption controller counts that scale (so an extra Ready pod is no free slack).
        # A replacement is added to the scale once there is room for it, not while Pending:
        # a make-before-break tool that over-commits would wedge its own budget.
        # Over a grouped workload the budget counts pods, not groups.
        wl = self.s.workloads[w]
        scale = max(wl.pods, self.matched[w] - self.pending_of[w])
        st = status(spec, expected_scale=scale, matched_pods=self.matched[w],
                    current_healthy=self.ready_pods[w])
        if self.pod_state[p] != READY_STATE:
            return unhealthy_pod_may_be_evicted(spec, current_healthy=self.ready_pods[w],
                                                desired=st.desired_healthy)
        need = 1
        if self.pod_group[p] >= 0 and self.s.upgrade.strategy == "drainsafe":
            need = disruptions_needed(wl.group_size, wl.recreates_group or self.is_leader(p))
        return st.disruptions_allowed >= need

    def try_evict(self, p: int) -> None:
        state = self.pod_state[p]
        if state in (TERMINATING, DELETED):
            return
        if state == PENDING:
            # A pod that never got a node is not on the drained node; nothing to evict.
            return
        shared = self.shared is not None and p in self.old_step \
            and self.sharing(self.pod_w[p])
        if shared and not self.gate_open(p):
            self.gated[self.pod_w[p]].append(p)
            return
        if self.evictable(p):
            self.delete(p)
            if shared:
                self.evicted_from_part(p)
            return
        if math.isnan(self.pod_first_refusal[p]):
            self.pod_first_refusal[p] = self.now
        self.waiters[self.pod_w[p]].append(p)

    def on_evict(self, p: int) -> None:
        self.try_evict(p)

    def delete(self, p: int) -> None:
        # The consumers' routing up to now, before p stops being Ready: a pod learnt of
        # since the last deletion is routed to.
        self.catch_up()
        g = self.pod_group[p]
        if g >= 0:
            if self.s.workloads[self.g_w[g]].recreates_group or self.is_leader(p):
                # The LWS controller takes the rest of the group down with it (or, under
                # None, the leader's workers go with their StatefulSet it owns).
                self.delete_group(g)
            else:
                self.delete_group_pod(p)
            return
        w = self.pod_w[p]
        was_ready = self.pod_state[p] == READY_STATE
        self.pod_state[p] = TERMINATING
        self.matched[w] -= 1
        tt = self.times[w]
        if was_ready:
            self.ready[w] -= 1
            self.ready_pods[w] -= 1
            self.record_ready()
            gone = self.serving_deleted(p, w)
        else:
            gone = tt.close
        self.push(self.now + gone, GONE, p)
        # The ReplicaSet replaces a deleted pod at once. drainsafe started the replacement
        # of a Ready pod before evicting it; a pod evicted before it was Ready (say a
        # replacement on a node drained meanwhile) is re-made and keeps its duty.
        if self.s.upgrade.strategy == "kubectl":
            self.pending.append(self.new_pod(w))
            self.schedule_pending()
        else:
            # Surge: a replacement evicted while the pod it replaces still runs passes its
            # duty on to a new one; any other evicted pod already has its replacement.
            old = self.pod_replaces[p]
            if old >= 0 and self.pod_state[old] in (STARTING, READY_STATE):
                heir = self.replaced_by.get(p, -1)
                if heir >= 0 and self.pod_state[heir] in (PENDING, STARTING, READY_STATE):
                    # p's own replacement takes over: it now replaces the pod p replaced.
                    self.pod_replaces[heir] = old
                    self.replaced_by[old] = heir
                    self.pass_duty(p, heir)
                    if self.pod_state[heir] == READY_STATE:
                        self.on_new_ready(heir)
                else:
                    r = self.new_pod(w, replaces=old)
                    self.replaced_by[old] = r
                    self.pass_duty(p, r)
                    self.pending.append(r)
                    self.schedule_pending()

    def pass_duty(self, p: int, heir: int) -> None:
        """A new pod of a drainsafe group was evicted before it served: its heir joins the
        group in its place."""
        key = self.step_of.pop(p, None)
        if key is not None and key in self.step_new:
            self.step_new[key].discard(p)
            self.step_new[key].add(heir)
            self.step_of[heir] = key

    def on_new_ready(self, r: int) -> None:
        if self.s.upgrade.strategy == "drainsafe":
            self.step_ready(r)
        else:
            old = self.pod_replaces[r]
            if old >= 0:
                self.try_evict(old)

    def wake_waiters(self, w: int) -> None:
        waiting = self.waiters[w]
        if not waiting:
            return
        self.waiters[w] = []
        retry = self.s.upgrade.eviction_retry
        for p in waiting:
            if self.s.upgrade.strategy == "drainsafe":
                # drainsafe waits on the budget's status, not on a retry timer.
                self.push(self.now, EVICT, p)
                continue
            first = self.pod_first_refusal[p]
            ticks = math.ceil((self.now - first) / retry - 1e-9)
            self.push(first + max(ticks, 1) * retry, EVICT, p)
