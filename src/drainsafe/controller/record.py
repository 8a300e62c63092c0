"""What the guard writes on pods, and how it recognises the surges it started.

The surge itself is recorded by the surge engine, on the Deployment, before any scale
change (drainsafe.controller.engine); the guard adds only:

- `drainsafe.io/eviction-held-since` on a pod, when any replica first answers 429 for it:
  the shared start of the hold, so every replica applies the same hold limit and the leader
  knows which pods want a stand-in;
- `drainsafe.io/eviction-released` on a pod whose hold was given up (the reason), so the
  leader stops surging for it and the Event is written once.

Which tool owns a surge is in the record itself (SurgeRecord.guard), written in the same
resourceVersion-guarded patch, so the leader restores only surges it owns, never one a
`drainsafe drain` is running, and a drain waits for the guard's.
"""

from __future__ import annotations

import datetime as dt

HOLD_ANNOTATION = "drainsafe.io/eviction-held-since"
RELEASED_ANNOTATION = "drainsafe.io/eviction-released"


def rfc3339(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
