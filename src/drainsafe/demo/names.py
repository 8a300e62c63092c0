"""The demo's run names, as the table's header and results.json's `name` say them. A module
of its own, light to import, so the live view can show them before the lab code loads."""

from __future__ import annotations

NAIVE = "kubectl drain (naive)"
SEEDS = "kubectl drain (seeds' settings)"
DRAINSAFE = "drainsafe drain"
CONTROLLER = "kubectl drain + drainsafe controller"
ALL = (NAIVE, SEEDS, DRAINSAFE, CONTROLLER)
