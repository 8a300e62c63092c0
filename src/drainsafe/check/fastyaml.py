"""Build Python objects straight from libyaml's events: PyYAML's CSafeLoader, minus the nodes.

PyYAML's C loader still composes a node graph and constructs objects from it in Python; for
plain Kubernetes YAML most of that work is resolving the same scalars ("name", "spec",
"containerPort") again and again. This builder reads the C parser's events once, resolves
plain scalars as PyYAML's own implicit resolvers do (scalars.py, cached), and shares aliased
objects as PyYAML does. Anything unusual (explicit tags, merge keys, complex keys) raises
`Unsupported`, and the caller re-reads that input with the standard loader, so behaviour and
error messages stay PyYAML's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

from drainsafe.check import scalars

Unsupported = scalars.Unsupported
_plain = scalars.plain
_STR = "tag:yaml.org,2002:str"
_NO_KEY = object()


def _scalar(event: Any) -> Any:
    tag = event.tag
    if tag is not None and tag != "!":
        if tag == _STR:
            return event.value
        raise Unsupported(tag)
    if event.implicit[0] and tag is None:
        return _plain(event.value)
    return event.value


def documents(text: str) -> Iterator[tuple[Any, int, int, bool]]:
    """Yield (object, first line, last line, has aliases) per document; raise Unsupported or
    YAMLError."""
    loader = yaml.CSafeLoader(text)
    cache = scalars.CACHE
    try:
        get = loader.get_event
        anchors: dict[str, Any] = {}
        # The open collection, whether it is a list, and its pending key, kept in locals
        # (the hot loop); enclosing ones wait on the stack.
        container: Any = None
        is_list = False
        key: Any = _NO_KEY
        stack: list[tuple[Any, bool, Any]] = []
        root: Any = None
        start = 0
        aliased = False
        while True:
            event: Any = get()
            cls = type(event)
            if cls is ScalarEvent:
                if event.tag is None:
                    raw = event.value
                    if event.implicit[0]:
                        value = cache.get(raw, _NO_KEY)
                        if value is _NO_KEY:
                            value = _plain(raw)
                    else:
                        value = raw
                else:
                    value = _scalar(event)
                if event.anchor is not None:
                    anchors[event.anchor] = value
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                if event.tag is not None and event.tag != "!" and not event.tag.endswith(
                        (":map", ":seq")):
                    raise Unsupported(event.tag)
                value = {} if cls is MappingStartEvent else []
                if event.anchor is not None:
                    anchors[event.anchor] = value
                if container is None:
                    start = event.start_mark.line + 1
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                done = container
                container, is_list, key = stack.pop()
                if container is None:
                    root = done
                continue
            elif cls is AliasEvent:
                if event.anchor not in anchors:
                    raise Unsupported("undefined alias")  # PyYAML words the error
                value = anchors[event.anchor]
                aliased = True
            elif cls is DocumentStartEvent:
                anchors = {}
                aliased = False
                root = None
                start = event.end_mark.line + 1
                continue
            elif cls is DocumentEndEvent:
                yield root, start, event.start_mark.line + 1, aliased
                continue
            elif cls is StreamStartEvent:
                continue
            elif cls is StreamEndEvent:
                return
            else:
                raise Unsupported(type(event).__name__)
            # Place the value in its parent (or make it the document's root).
            if container is None:
                root = value
                if cls is ScalarEvent or cls is AliasEvent:
                    start = event.start_mark.line + 1
            elif is_list:
                container.append(value)
            elif key is _NO_KEY:
                if type(value) in (dict, list) or value == "<<":
                    raise Unsupported("complex or merge key")
                key = value
            else:
                container[key] = value
                key = _NO_KEY
            if cls is MappingStartEvent or cls is SequenceStartEvent:
                stack.append((container, is_list, key))
                container, is_list, key = value, cls is SequenceStartEvent, _NO_KEY
    finally:
        loader.dispose()
