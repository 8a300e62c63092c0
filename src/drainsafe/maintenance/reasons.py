"""The typed reasons a NodeMaintenance gives: per node (status.nodes[].reason), and in the
Events on the object (core/v1 Event.reason, UpperCamelCase as the API conventions ask of a
reason: "a short, machine understandable string"). Pure.
"""

from __future__ import annotations

from typing import Literal

# Why a node is in its state (status.nodes[].reason).
NodeReason = Literal[
    "",  # Pending, not yet in a wave
    "Cordoning",  # Cordoned: written before the cordon
    "Draining",
    "Deferred",  # Pending again: refused only for what the other nodes in progress hold
    "WaitingForRoom",  # Pending: its stand-ins do not fit beside the wave (roomwaves)
    "WaitingForBudget",  # Pending: a budget would be hit by more nodes of the wave at once
    "WaitingForSurge",  # Pending: a workload of it is being surged for another node
    "CannotSurge",  # Pending: no room even alone; started last, once it fits
    "Drained",  # Drained, or AwaitingMaintenance
    "NodeGone",  # AwaitingMaintenance, and no node of its name exists (maintenance.maintained)
    "Uncordoned",
    "Refused",  # Failed: refused before any eviction, the cordon given back
    "DrainFailed",  # Failed: the drain stopped; the node stays cordoned and recorded
    "NotOurCordon",  # Failed: the cordon was not drainsafe's, so not removed
    # Failed: not marked maintained within maintainedWhen.timeoutSeconds of its drain;
    # stays cordoned and recorded (maintenance.maintained.wait_bound)
    "MaintenanceTimedOut",
    "Error",  # Failed: an API error past the retries
]

# Event.reason on the NodeMaintenance.
EventReason = Literal[
    "NodeStarted", "NodeDeferred", "NodeDrained", "NodeAwaitingMaintenance",
    "NodeUncordoned", "NodeLeftCordoned", "NodeFailed",
    "Paused", "Resumed", "Succeeded", "Failed", "Deleting", "CapacityBelowDesired",
]
