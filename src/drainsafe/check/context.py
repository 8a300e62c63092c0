"""The context a check runs in: cluster version, declared figures, disabled rules.

Values come from, in rising priority: defaults, a config file (`.drainsafe.yaml`, or
`[tool.drainsafe]` in pyproject.toml, found in the current directory or its parents),
command-line flags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from drainsafe.budget import DEFAULT_BUFFER_SECONDS, DEFAULT_PROPAGATION_SECONDS
from drainsafe.check.findings import Severity

DEFAULT_CLUSTER_VERSION = (1, 34)
"""A current Kubernetes minor release (the sleep action is GA from 1.34)."""

CONFIG_FILE = ".drainsafe.yaml"

MAX_REQUEST_ANNOTATION = "drainsafe.io/max-request-seconds"
SHUTDOWN_ANNOTATION = "drainsafe.io/shutdown-seconds"
STARTUP_ANNOTATION = "drainsafe.io/startup-seconds"
"""How long a replacement pod takes to become Ready (scheduling, image pull, model load)."""
IGNORE_ANNOTATION = "drainsafe.io/ignore"

MAX_SECONDS = 2**31 - 1
"""The largest number of seconds a flag, config value or drainsafe.io annotation may hold
(about 68 years; validate.py applies it to the annotations)."""


class ConfigError(ValueError):
    """A config value or flag that cannot be used; the message names where it came from."""


@dataclass(frozen=True)
class Context:
    cluster_version: tuple[int, int] = DEFAULT_CLUSTER_VERSION
    max_request_seconds: float | None = None
    propagation_seconds: float = DEFAULT_PROPAGATION_SECONDS
    max_grace_seconds: float | None = None
    buffer_seconds: float = DEFAULT_BUFFER_SECONDS
    disabled: frozenset[str] = field(default_factory=frozenset)
    fail_on: Severity | None = Severity.WARNING
    """Lowest severity that makes the exit code 1 (None: never)."""
    config_file: str | None = None

    def at_least(self, major: int, minor: int) -> bool:
        return self.cluster_version >= (major, minor)

    @property
    def version_text(self) -> str:
        return f"{self.cluster_version[0]}.{self.cluster_version[1]}"


def parse_version(text: str, where: str = "--cluster-version") -> tuple[int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", str(text).strip())
    if not match:
        raise ConfigError(f"{where}: expected a version like 1.30, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def parse_seconds(value: object, where: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a number of seconds, got {value!r}")
    try:
        seconds = float(str(value).strip().removesuffix("s"))
    except ValueError:
        raise ConfigError(f"{where}: expected a number of seconds, got {value!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{where}: must be a finite number >= 0, got {value!r}")
    if seconds > MAX_SECONDS:  # a fix would write a grace period no API server takes
        raise ConfigError(f"{where}: must be at most {MAX_SECONDS:,}, got {value!r}")
    return seconds


def parse_fail_on(text: str, where: str = "--fail-on") -> Severity | None:
    if str(text).strip().lower() == "none":
        return None
    try:
        return Severity.parse(str(text))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}; or none") from None


def find_config(start: Path) -> Path | None:
    """The nearest .drainsafe.yaml, or pyproject.toml with a [tool.drainsafe] table."""
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
    return None


_TOOL = r"""(?:tool|"tool"|'tool')"""
_TOOL_TABLE = (rf"""(?m)^[ \t]*(?:\[\[?[ \t]*{_TOOL}[ \t]*(?:\]|\.[ \t]*["']?drainsafe)"""
               rf"""|{_TOOL}[ \t]*(?:=|\.[ \t]*["']?drainsafe))""")
"""A line that may put a drainsafe key under `tool` (TOML 1.0): a table header [tool] or
[tool.drainsafe...] (or [[...]]), a dotted key tool.drainsafe..., an inline table tool =
{...}; spaces around the dot and quoted keys included. Only then is the file parsed.
Compiled only for a file that names drainsafe (compiling it took ~1 ms)."""


def _has_tool_table(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    # A key written neither plainly nor with TOML's \u or \U escapes is not there, nor is
    # one that no line could put under `tool` (a project depending on drainsafe names it
    # elsewhere): most projects' pyproject.toml is not parsed (tomllib, datetime and the
    # parse: 17 M instructions, ~3.5 ms of start-up, in drainsafe's own).
    if "\\u" not in text and "\\U" not in text and (
            "drainsafe" not in text or re.search(_TOOL_TABLE, text) is None):
        return False
    import tomllib  # here: most runs parse no pyproject.toml (start-up is part of check's cost)

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return isinstance(data.get("tool"), dict) and "drainsafe" in data["tool"]


def load_config(path: Path) -> dict[str, Any]:
    """The raw settings table of a config file (errors name the file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    if path.name == "pyproject.toml":
        import tomllib

        try:
            data: Any = tomllib.loads(text).get("tool", {}).get("drainsafe", {})
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    else:
        import yaml  # only a config file needs it: a run without one never loads PyYAML

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


_KEYS = {
    "cluster-version", "max-request-seconds", "propagation-seconds", "max-grace-seconds",
    "buffer-seconds", "disable", "fail-on",
}


def apply_config(base: Context, settings: Mapping[str, Any], source: str,
                 known_rules: frozenset[str]) -> Context:
    """Context with the settings of a config file (or flags) applied; unknown keys are errors."""
    values: dict[str, Any] = {}
    for raw_key, value in settings.items():
        key = str(raw_key).replace("_", "-")
        where = f"--{key}" if source == "command line" else f"{source}: {key}"
        if key not in _KEYS:
            raise ConfigError(f"{source}: unknown setting {raw_key!r} "
                              f"(known: {', '.join(sorted(_KEYS))})")
        if value is None:
            continue
        if key == "cluster-version":
            values["cluster_version"] = parse_version(str(value), where)
        elif key == "max-request-seconds":
            values["max_request_seconds"] = parse_seconds(value, where)
        elif key == "propagation-seconds":
            values["propagation_seconds"] = parse_seconds(value, where)
        elif key == "max-grace-seconds":
            values["max_grace_seconds"] = parse_seconds(value, where)
        elif key == "buffer-seconds":
            values["buffer_seconds"] = parse_seconds(value, where)
        elif key == "fail-on":
            values["fail_on"] = parse_fail_on(str(value), where)
        elif key == "disable":
            rules = _rule_list(value, where)
            unknown = sorted(rules - known_rules)
            if unknown:
                raise ConfigError(f"{where}: unknown rule(s) {', '.join(unknown)}")
            values["disabled"] = base.disabled | rules
    return replace(base, **values)


def _rule_list(value: object, where: str) -> frozenset[str]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list):
        items = [str(v) for v in value]
    else:
        raise ConfigError(f"{where}: expected a list of rule ids, got {value!r}")
    return frozenset(item.strip() for item in items if item.strip())
