"""Fix snippets: the YAML a user pastes, nested at the right place in their object."""

from __future__ import annotations

from typing import Any

import yaml

from drainsafe.check.findings import Path

_NESTED: dict[tuple[Path, str, tuple[tuple[int, str], ...]], str] = {}


def nest(path: Path, value: Any, item_names: dict[int, str] | None = None) -> str:
    """YAML for `value` placed at `path`; list indices become `- name: ...` items."""
    # Many findings share a snippet: key on the small value, not the whole nested node.
    key = (path, repr(value), tuple(sorted(item_names.items())) if item_names else ())
    text = _NESTED.get(key)
    if text is None:
        text = _nest(path, value, item_names or {})
        if len(_NESTED) < 10_000:
            _NESTED[key] = text
    return text


def _nest(path: Path, value: Any, names: dict[int, str]) -> str:
    node: Any = value
    for position in range(len(path) - 1, -1, -1):
        key = path[position]
        if isinstance(key, int):
            item: dict[str, Any] = {"name": names[position]} if position in names else {}
            if isinstance(node, dict):
                item.update(node)
            node = [item]
        else:
            node = {key: node}
    return dump(node)


_DUMPED: dict[str, str] = {}


def dump(node: Any) -> str:
    """Block-style YAML; many findings share a snippet, so each distinct one is dumped once."""
    key = repr(node)
    text = _DUMPED.get(key)
    if text is None:
        text = yaml.dump(node, Dumper=_DUMPER, sort_keys=False, default_flow_style=False,
                         width=100).rstrip("\n")
        if len(_DUMPED) < 10_000:
            _DUMPED[key] = text
    return text


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def container_fix(pod_path: Path, container_name: str, fields: dict[str, Any],
                  pod_fields: dict[str, Any] | None = None) -> str:
    """A snippet that sets pod-level fields and fields of one container."""
    pod: dict[str, Any] = dict(pod_fields or {})
    pod["containers"] = [{"name": container_name, **fields}]
    return nest(_named(pod_path), pod)


def pod_fix(pod_path: Path, fields: dict[str, Any]) -> str:
    return nest(_named(pod_path), fields)


def _named(path: Path) -> Path:
    # Embedded pod specs may sit in lists (e.g. workerGroupSpecs[0]); keep the keys only.
    return tuple(k for k in path if isinstance(k, str))
