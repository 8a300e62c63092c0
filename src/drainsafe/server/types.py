"""The ASGI types drainsafe's middleware and uvicorn shell speak (asgiref's ASGI 3.0 spec,
asgiref/typing.py, loosened to mappings as uvicorn passes them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
