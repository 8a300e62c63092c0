"""Reading the input: files, directories, stdin; multi-document YAML, JSON, `kind: List`.

Speed matters (CI runs this on every chart change): PyYAML's libyaml-backed CSafeLoader
reads, and each document keeps only its line span; finer line numbers are found later,
and only for the objects that have findings (see locate.py).

Bad input loses nothing: an unparsable document becomes an InputError naming the file and
line, and the documents and files around it are still read. A file above the size limit is
refused before it is read, and a document whose aliases expand past a node budget (a
"billion laughs" bomb) is refused instead of walked.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from drainsafe.check import rsyaml

if TYPE_CHECKING:
    import yaml

MAX_INPUT_BYTES = 8 * 1024 * 1024
"""Refuse a single input larger than this (a rendered chart is rarely above 1 MB). Reading
and checking hold ~45 bytes of memory per byte of YAML: 8 MB of Deployments took 350 MB and
5 s on the 2-core dev machine (docs/check.md)."""

MAX_TOTAL_BYTES = 64 * 1024 * 1024
"""Refuse inputs beyond this many bytes read in one run (~1.2 GB of memory at the limit)."""

MAX_NESTING = 1000
"""Deepest nesting read: libyaml's own limit for YAML, and Python's recursion limit for JSON."""

MAX_EXPANDED_NODES = 2_000_000
"""Aliases may share nodes; a document that expands past this many is refused."""

YAML_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"

_TEMPLATE = re.compile(r"\{\{-?\s*")
_ANCHOR = re.compile(r"(?:^|[\s\[{,:-])&[^\s\[\]{},]+")


@dataclass
class SourceText:
    """One input's text, split into lines only when a finding needs a line number."""

    name: str
    text: str
    _lines: list[str] | None = field(default=None, repr=False)
    located: dict[int, Any] = field(default_factory=dict, repr=False)
    """Per document (by its first line): its text and the line lookups done (locate.py)."""

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines


@dataclass(slots=True)
class Document:
    """A Kubernetes object as read: the parsed dict and where it came from. Not changed
    once read; not frozen, since a frozen dataclass sets each field through
    object.__setattr__ (three times the cost, for every object read)."""

    obj: dict[str, Any]
    source: SourceText
    doc_index: int
    start_line: int
    """1-based line of the document's first node."""
    end_line: int
    prefix: tuple[str | int, ...] = ()
    """Path of the object inside its document: ("items", 3) for a member of a List."""
    span: tuple[int, int] | None = None
    """Where lines start_line..end_line are in the source's text, when the reader knows
    (yaml-rs: a text whose only line break is \\n); locate reads them there."""

    @property
    def file(self) -> str:
        return self.source.name


@dataclass(frozen=True)
class InputError:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass
class Loaded:
    documents: list[Document] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    inputs: int = 0
    """Files (or stdin) read."""
    empty_documents: int = 0
    notes: list[str] = field(default_factory=list)
    """Inputs skipped on purpose, and why (see expand_paths)."""


def expand_paths(args: Iterable[str], notes: list[str] | None = None
                 ) -> tuple[list[str], list[InputError]]:
    """Arguments to input names: files as given, directories walked for *.yaml/*.yml/*.json.

    A walked name that is not a regular file (a FIFO, a socket, a device) is skipped with a
    note in `notes`: opening a FIFO nobody writes to would hang the walk. A FIFO named as an
    argument is read, as `drainsafe check <(helm template ...)` needs."""
    paths: list[str] = []
    errors: list[InputError] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        # A file named twice (a directory and a file in it) would double every object, and
        # make each PDB overlap itself.
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            paths.append(path)

    for arg in args:
        if arg == STDIN:
            paths.append(STDIN)
            continue
        path = Path(arg)
        if path.is_dir():
            found = sorted(_walk(path))
            if not found:
                errors.append(InputError(arg, None, "directory has no .yaml, .yml or .json files"))
            for p in found:
                kind = _not_regular(p)
                if kind is None:
                    add(str(p))
                elif notes is not None:
                    notes.append(f"{p}: skipped: {kind}, not a regular file")
        elif path.exists():
            add(arg)
        else:
            errors.append(InputError(arg, None, _missing(arg)))
    return paths, errors


def _walk(root: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(root):
        # Hidden directories (.git, .venv, ...) hold no manifests of the project.
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in files:
            if name.endswith(YAML_SUFFIXES) and not name.startswith("."):
                yield Path(directory) / name


def _not_regular(path: Path) -> str | None:
    """What a walked name is when it is not a regular file (None: regular, or unreadable,
    which reading then reports)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _missing(arg: str) -> str:
    """Why an argument that does not exist does not: a symbolic link loop and a broken link
    are named as such (both look like "no such file" to Path.exists)."""
    if not os.path.islink(arg):
        return "no such file or directory"
    try:
        os.stat(arg)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop (too many levels of symbolic links)"
    return f"broken symbolic link to {os.readlink(arg)!r}"


def read_input(name: str, stdin: BinaryIO | None = None) -> SourceText | InputError:
    display = STDIN_NAME if name == STDIN else name
    try:
        if name == STDIN:
            stream = stdin if stdin is not None else sys.stdin.buffer
            data = stream.read(MAX_INPUT_BYTES + 1)
            if len(data) > MAX_INPUT_BYTES:
                # Only the limit was read: how much more a pipe holds is unknown.
                return InputError(display, None, f"input is over the {_limit()} limit; split it")
        else:
            size = os.path.getsize(name)
            if size > MAX_INPUT_BYTES:
                return InputError(display, None, _too_big(size))
            with open(name, "rb") as handle:
                # Read what the size says (a read of the limit allocates the limit, 32 MiB,
                # for every file), then whatever a growing file added, up to the limit.
                data = handle.read(size + 1)
                if len(data) > size:
                    data += handle.read(MAX_INPUT_BYTES + 1 - len(data))
    except OSError as exc:
        return InputError(display, None, f"cannot read: {exc.strerror or exc}")
    if len(data) > MAX_INPUT_BYTES:
        return InputError(display, None, _too_big(len(data)))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return InputError(display, line, "not UTF-8 text")
    return SourceText(display, text)


def _too_big(size: int) -> str:
    return (f"input is {size / 1024 / 1024:.1f} MiB ({size:,} bytes), above the {_limit()} "
            "limit; split it")


def _limit(limit: int | None = None) -> str:
    return f"{(MAX_INPUT_BYTES if limit is None else limit) / 1024 / 1024:g} MiB"


def parse(source: SourceText, loaded: Loaded, *, quick: bool = True) -> None:
    """Add the source's objects and errors to `loaded`. `quick`: try yaml-rs first (see
    rsyaml.py; it reads what it takes exactly as libyaml does, only quicker)."""
    text = source.text
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and source.name.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            loaded.errors.append(InputError(source.name, exc.lineno, f"invalid JSON: {exc.msg}"))
            return
        except RecursionError:
            # Python's parser recurses per level; libyaml stops YAML at the same depth.
            loaded.errors.append(InputError(
                source.name, None, f"JSON nested deeper than {MAX_NESTING:,} levels"))
            return
        _add(loaded, source, data, 0, 1, text.count("\n") + 1)
        return
    found: list[tuple[Any, int, int, bool]] = []
    taken = None
    error: InputError | None = None
    try:
        if quick:
            taken = _quick(text)
    except (ValueError, TypeError, RecursionError) as exc:
        error = _value_error(source, exc)
    else:
        if taken is None:
            found, error = _libyaml(source)
    if taken is not None:
        # yaml-rs bounds what aliases add (see rsyaml.MAX_REPLAYED_EVENTS): when no
        # document here can exceed the budget, none needs walking.
        walk = len(text) + rsyaml.MAX_REPLAYED_EVENTS >= MAX_EXPANDED_NODES
        for index, (data, start, end, aliased, span) in enumerate(taken):
            if aliased and walk:
                _take(loaded, source, data, index, start, end, True, span)
            else:
                _add(loaded, source, data, index, start, end, span)
    for index, (data, start, end, aliased) in enumerate(found):
        _take(loaded, source, data, index, start, end, aliased, None)
    if error is not None:
        loaded.errors.append(error)


def _take(loaded: Loaded, source: SourceText, data: object, index: int, start: int, end: int,
          aliased: bool, span: tuple[int, int] | None) -> None:
    """Add a document read, unless its aliases expand past the node budget."""
    if aliased and not _within_budget(data):
        loaded.errors.append(InputError(
            source.name, start,
            f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} nodes "
            "(alias bomb or self-reference); document refused"))
    else:
        _add(loaded, source, data, index, start, end, span)


def _quick(text: str) -> list[tuple[Any, int, int, bool, tuple[int, int]]] | None:
    try:
        return rsyaml.documents(text)
    except rsyaml.Unsupported:
        return None


def _libyaml(source: SourceText) -> tuple[list[tuple[Any, int, int, bool]], InputError | None]:
    """What libyaml reads of an input yaml-rs leaves (fastyaml.py, else PyYAML's own
    construction), and its error; the documents before an error are kept."""
    import yaml  # the fallback only: an input yaml-rs reads never loads PyYAML

    from drainsafe.check import fastyaml

    found: list[tuple[Any, int, int, bool]] = []
    try:
        for item in fastyaml.documents(source.text):
            found.append(item)
    except fastyaml.Unsupported:
        return _standard(source)
    except yaml.YAMLError as exc:
        return found, _yaml_error(source, exc)
    except (ValueError, TypeError, RecursionError) as exc:
        return found, _value_error(source, exc)
    return found, None


def _value_error(source: SourceText, exc: Exception) -> InputError:
    return InputError(source.name, None, f"invalid YAML value: {exc}")


def _standard(source: SourceText) -> tuple[list[tuple[Any, int, int, bool]], InputError | None]:
    """PyYAML's own construction, for inputs the fast path leaves to it (tags, merge keys)."""
    import yaml  # the fallback's fallback (see _libyaml)

    aliased = _ANCHOR.search(source.text) is not None
    found: list[tuple[Any, int, int, bool]] = []
    loader = yaml.CSafeLoader(source.text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            data = loader.construct_document(node)
            found.append((data, node.start_mark.line + 1, node.end_mark.line + 1, aliased))
    except yaml.YAMLError as exc:
        return found, _yaml_error(source, exc)
    except (ValueError, TypeError, RecursionError) as exc:
        # The constructor rejects some scalars (e.g. an out-of-range timestamp).
        return found, _value_error(source, exc)
    finally:
        loader.dispose()
    return found, None


def _yaml_error(source: SourceText, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    template = _TEMPLATE.search(source.text)
    if template is not None:
        tline = source.text.count("\n", 0, template.start()) + 1
        return InputError(
            source.name, line,
            f"unrendered Helm template syntax ({{{{ ... }}}} first at line {tline}) "
            "is not YAML; render the chart first: helm template RELEASE CHART | "
            "drainsafe check -")
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return InputError(source.name, line, f"invalid YAML: {problem}")


def _add(loaded: Loaded, source: SourceText, data: object, index: int,
         start: int, end: int, span: tuple[int, int] | None = None) -> None:
    if not isinstance(data, dict):
        if data is None:
            loaded.empty_documents += 1
        else:
            loaded.errors.append(InputError(
                source.name, start,
                f"document {index + 1} is a {type(data).__name__}, not a Kubernetes object"))
        return
    kind = data.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and (
            kind == "List" or isinstance(data.get("items"), list)):
        items = data.get("items")
        if not isinstance(items, list):
            loaded.errors.append(InputError(source.name, start, "kind: List without items"))
            return
        for i, item in enumerate(items):
            if isinstance(item, dict):
                loaded.documents.append(
                    Document(item, source, index, start, end, ("items", i), span))
            else:
                loaded.errors.append(InputError(
                    source.name, start, f"items[{i}] is not a Kubernetes object"))
        return
    loaded.documents.append(Document(data, source, index, start, end, (), span))


def _within_budget(data: object) -> bool:
    """Walk the document as a consumer would (aliases expanded) until the budget runs out.
    A collection inside itself expands without end: refused before the walk, which would
    take seconds to run the budget out."""
    if _holds_itself(data):
        return False
    budget = MAX_EXPANDED_NODES
    stack: list[object] = [data]
    while stack:
        budget -= 1
        if budget < 0:
            return False
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _holds_itself(data: object) -> bool:
    """Whether a collection is inside itself (PyYAML builds that cycle for an alias within
    its own anchored node). Each distinct collection is entered once, so this costs what the
    text holds, not what its aliases expand to."""
    entered: set[int] = set()  # collections on the path from the root
    left: set[int] = set()  # collections whole walked, found free of cycles
    stack: list[tuple[dict[Any, Any] | list[Any], bool]] = []
    if isinstance(data, dict | list):
        stack.append((data, False))
    while stack:
        item, leaving = stack.pop()
        key = id(item)
        if leaving:
            entered.discard(key)
            left.add(key)
            continue
        if key in left:
            continue
        if key in entered:
            return True
        entered.add(key)
        stack.append((item, True))
        stack.extend((child, False) for child in (item.values() if isinstance(item, dict)
                                                  else item) if isinstance(child, dict | list))
    return False


def load(args: Iterable[str], stdin: BinaryIO | None = None) -> Loaded:
    loaded = Loaded()
    names, loaded.errors = expand_paths(args, loaded.notes)
    read_into(loaded, names, stdin)
    return loaded


def read_into(loaded: Loaded, names: Iterable[str], stdin: BinaryIO | None = None) -> None:
    """Read and parse the named inputs (expand_paths' names) into `loaded`, in order."""
    total = 0
    for name in names:
        if total > MAX_TOTAL_BYTES:
            loaded.errors.append(InputError(
                STDIN_NAME if name == STDIN else name, None,
                f"not read: the inputs before it reach the {_limit(MAX_TOTAL_BYTES)} limit "
                "of one run; check the inputs in parts"))
            continue
        source = read_input(name, stdin)
        take(loaded, source)
        if not isinstance(source, InputError):
            total += len(source.text)


def take(loaded: Loaded, source: SourceText | InputError) -> None:
    """Add one input as read_input gave it (its objects, or why not) to `loaded`."""
    loaded.inputs += 1
    if isinstance(source, InputError):
        loaded.errors.append(source)
        return
    kept = len(loaded.documents)
    try:
        parse(source, loaded)
    except Exception as exc:  # one input's failure must not lose the others
        # No known input gets here; if one does, it is named, its partial objects are
        # dropped, and the other inputs are still checked.
        del loaded.documents[kept:]
        loaded.errors.append(InputError(
            source.name, None, f"could not be read ({type(exc).__name__}: {exc}); "
            "this is a drainsafe bug, please report it with the input"))
