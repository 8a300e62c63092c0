"""OpenAPI documents: the lab serves none, so kubectl create/apply must skip schema checks.

See docs/lab-api.md for which kubectl versions need --validate=false.
"""

from __future__ import annotations

from typing import Any


def document(path: str) -> dict[str, Any] | None:
    return None
