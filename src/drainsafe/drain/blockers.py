"""What refuses a drain before anything changes: a typed kind, the object, why, the fix.

Each part of the plan (drain.pods, drain.budgets, drain.strategy, drain.plan's room check)
adds the blockers it finds; any blocker refuses the whole plan, and the refusal prints
every one with its fix (kubectl drain, by contrast, finds most of these only while it
retries evictions until --timeout, which defaults to never).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BlockerKind = Literal["no-node", "unmanaged", "local-data", "multiple-pdbs", "wedged-budget",
                      "no-room", "bad-budget", "surge-owned", "no-domain", "below-floor"]


@dataclass(frozen=True)
class Blocker:
    kind: BlockerKind
    object: str
    message: str
    fix: str
    node: str = ""  # surge-owned: the node whose unfinished drain recorded the surge
