"""Read plain Kubernetes YAML with yaml-rs (Rust), ten times quicker than libyaml's events.

PyYAML reads YAML 1.1 and yaml-rs YAML 1.2 with extensions of its own, so they disagree on
some plain scalars (`yes`, `0777`, `1:30`, `1e3`, `_1`, dates...), and yaml-rs accepts a few
things libyaml refuses (control characters, empty and complex keys). Check's behaviour is
PyYAML's, so this reader takes an input only when a gate proves the two read it alike:

- every whitespace-separated token of the text outside comments and outside quoted
  scalars that open and close on one line (split further at flow indicators) is a plain
  scalar both libraries resolve to the same value (asked of both and cached), or syntax that
  means the same to both; a double-quoted scalar with an escape is read by both, whole;
- no tags, merge keys, directives, `...` markers, tabs, carriage returns, control or
  YAML 1.1 line-break characters, empty or complex keys, duplicate keys;
- no alias can lie inside its own anchored node (yaml-rs reads it as null, PyYAML as a
  cycle), and no flow mapping has a collection as a key (a Helm `{{ }}`);
- nesting is shallow (yaml-rs 0.1.6 overflows its stack on ~10,000 nested block sequences).

Anything else, and any error yaml-rs raises, is `Unsupported`: the caller reads that input
with the libyaml path (fastyaml.py), so results and error messages stay PyYAML's. Document
spans follow libyaml's marks exactly (line of the first node; line of the next `---`, or
the stream's end). tests/check/test_rsyaml.py compares both readers with hypothesis.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from drainsafe.check import scalars

try:  # without it (no wheel for the platform), libyaml reads everything as before
    import yaml_rs
except ImportError:  # pragma: no cover - depends on the platform
    AVAILABLE = False
else:
    AVAILABLE = True

Unsupported = scalars.Unsupported

_SEPARATOR = re.compile(r"^---[ ]*(?:#[^\n]*)?$", re.M)
_CONTENT = re.compile(r"^[ ]*[^ \n#]", re.M)
_NO_NODE = " \n#"
"""What a line starting a node cannot start with (_CONTENT's first line, asked directly)."""
_DEEP_INDENT = "\n" + " " * 128
_NESTED_COMPACT = re.compile(r"- +-[ \n]")
"""Merge keys, and nested compact sequences (`- - x`; flow nesting yaml-rs itself limits
to 256)."""
_ASCII_REFUSED = tuple(chr(c) for c in (*range(0x00, 0x20), 0x7f) if c != 0x0A)
"""Control characters, tab and carriage return: each looked for with memchr (a find of one
character), quicker than one pass that maps every byte of the text."""
_NON_ASCII_REFUSED = (  # escapes for re, not literals: mypyc refuses surrogates
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
"""Searched with re.search (compiled at first use, then from re's cache): compiling it is
~0.8 ms of check's start-up, and ASCII input never needs it."""
_COMMENT = re.compile(r"^((?:[^'\"#\n]*[ ])?)#[^\n]*", re.M)
"""A comment on a line without quotes (where a `#` might be text): its words need no check."""


def _without_comments(text: str) -> str:
    """The text without the comments _COMMENT finds, found from each `#` instead of from
    every line's start (the same cuts: a `#` at a line's start or after a space, on a
    line with no quote before it)."""
    pieces: list[str] = []
    at = 0
    find, rfind = text.find, text.rfind
    hash_at = find("#")
    while hash_at != -1:
        line_start = rfind("\n", 0, hash_at) + 1
        line_end = find("\n", hash_at)
        if line_end == -1:
            line_end = len(text)
        before = text[line_start:hash_at]
        if (hash_at == line_start or text[hash_at - 1] == " ") and "'" not in before \
                and '"' not in before and "#" not in before:
            pieces.append(text[at:hash_at])
            at = line_end
        hash_at = find("#", line_end)
    pieces.append(text[at:])
    return "".join(pieces)


_NAME = re.compile(r"[A-Za-z0-9_-]+")
"""An anchor name as libyaml takes it (yaml-rs takes more, e.g. `.`)."""
_FLOW = re.compile(r"[\[\]{},]")
_REFUSED_START = ("!", "?", ":", "%", "@", "`", "<<", "=")
"""Tags, complex and empty keys, directives, reserved characters, merge keys, PyYAML's `=`
value."""
_BLOCK_INDICATORS = frozenset(("|", "|-", "|+", ">", ">-", ">+"))
"""Block scalar headers the gate takes (no explicit indentation indicator); each one is
checked by _block_scalars, and its body is text the token check skips."""
_TAIL = re.compile(r" [|>][-+]?[ ]*(?: #[^\n]*)?(?:\n|$)")
"""The end of a line whose last token (before a comment) is a block scalar indicator."""
_HEAD = re.compile(r"([ ]*)((?:-[ ]+)*)")
_INDENT = re.compile(r"[ ]*")
_SYNTAX = frozenset(("-", "#"))

_VERDICTS: dict[str, bool] = {}
_VERDICT_LIMIT = 200_000
_LINES_TAKEN: set[str] = set()
"""Lines that passed _lines_read (what makes a line pass lies on the line alone)."""
_LINES_TAKEN_LIMIT = 100_000


_SCALAR_VERDICTS: dict[str, bool] = {}
"""_same_scalar's answers: a token's verdict is kept (_VERDICTS), but one name is in many
tokens (`llm-7`, `llm-7,`, `llm-7}`, `llm-7}}`), each asking for it once or twice, and an
answer costs a yaml-rs parse (~21,000 instructions): 17,786 asks of ~2,700 scalars on the
mixed corpus (-6.0 % instructions of the whole command there, -0.5 % findings-heavy)."""


def _same_scalar(piece: str) -> bool:
    """Whether PyYAML and yaml-rs read `piece`, as a plain scalar, to the same value."""
    verdict = _SCALAR_VERDICTS.get(piece)
    if verdict is None:
        verdict = _scalar_verdict(piece)
        if len(_SCALAR_VERDICTS) < _VERDICT_LIMIT and len(piece) <= 64:
            _SCALAR_VERDICTS[piece] = verdict
    return verdict


def _scalar_verdict(piece: str) -> bool:
    try:
        ours = scalars.plain(piece)
    except Unsupported:  # timestamps, `=`: PyYAML's own constructors
        return False
    try:
        theirs = yaml_rs.loads(f"k: {piece}\n", parse_datetime=False)
    except (yaml_rs.YAMLDecodeError, ValueError):
        return False
    if not isinstance(theirs, dict) or list(theirs) != ["k"]:
        return False
    value = theirs["k"]
    return type(value) is type(ours) and repr(value) == repr(ours)  # repr: -0.0, nan


def _piece_ok(piece: str) -> bool:
    if not piece or piece in _SYNTAX:
        return True
    first = piece[0]
    if piece.startswith(_REFUSED_START):
        return False
    if first in "|>":
        return piece in _BLOCK_INDICATORS
    if first in "'\"#":  # quoted text, comments
        return True
    if first in "&*":  # anchors and aliases with plain names (as PyYAML writes them)
        return _NAME.fullmatch(piece, 1) is not None
    if piece.endswith(":"):
        piece = piece[:-1]
        if not piece:
            return False
    return _same_scalar(piece)


def _token_ok(token: str) -> bool:
    verdict = _VERDICTS.get(token)
    if verdict is not None:
        return verdict
    core = token.lstrip("[{").rstrip("]},")
    if len(core) < len(token) and core and not core.endswith(":") \
            and _FLOW.search(core) is None:
        # A scalar between flow indicators (`llm-7}}`, `[a,`): its one piece and the whole
        # token as a block scalar are both `core`, whose verdict is kept (the same name is
        # in several such tokens: -2.9 % instructions on the mixed corpus).
        verdict = _token_ok(core) and core[:1] not in ("|", ">")
    elif _FLOW.search(token) is None:
        verdict = _piece_ok(token)
    else:
        # Split at flow indicators (flow context), and also take the whole token as one
        # scalar (block context, where `1,000` is a single plain scalar).
        verdict = all(_piece_ok(p) and p[:1] not in ("|", ">")
                      for p in _FLOW.split(token)) and _piece_ok(
            token.lstrip("[{").rstrip("]},:") + (":" if token.endswith(":") else ""))
    if len(_VERDICTS) < _VERDICT_LIMIT and len(token) <= 64:  # names, numbers: not blobs
        _VERDICTS[token] = verdict
    return verdict


def gate(text: str) -> str | None:
    """Why this text is left to libyaml, or None when both libraries read it alike."""
    return _gate(text)[0]


def _gate(text: str) -> tuple[str | None, str, bool]:
    """gate's answer; the text with block scalars' bodies blanked (spaces, line breaks
    kept, so offsets and lines stay) for the checks that look at structure (aliases, flow
    keys), or when those find nothing outside the bodies, just the text outside them; and
    whether a flow collection may be a mapping key there (see _lines_read)."""
    why = _refusal(text)
    if why is not None:
        return why, text, True
    found = _block_scalars(text) if "|" in text or ">" in text else None
    if isinstance(found, str):
        return found, text, True
    if found is None:
        why, keys = _lines_read(text)
        return why, text, keys
    outside = "".join(found[::2])
    # The bodies blanked add only spaces after line breaks: the same answer in both texts.
    why, keys = _lines_read(outside)
    if "*" not in outside and not keys:
        # Nothing for the structure checks to find: they need no offsets into the text.
        return why, outside, False
    blanked = "".join(piece if n % 2 == 0 else
                      "\n".join(" " * len(line) for line in piece.split("\n"))
                      for n, piece in enumerate(found))
    return why, blanked, keys


def _refusal(text: str) -> str | None:
    """What the gate refuses before looking at tokens."""
    if not AVAILABLE:
        return "yaml-rs is not installed"
    if text.isascii():
        if any(c in text for c in _ASCII_REFUSED):
            return "tab, carriage return or control character"
    elif re.search(_NON_ASCII_REFUSED, text):
        return "tab, control, non-printable or YAML 1.1 line-break character"
    if _DEEP_INDENT in text:
        return "deep indentation"
    # Two scans that each start from a literal beat one alternation regex (which tries
    # every position); the earlier finding names the reason, as the alternation did.
    merge = _first_merge_key(text)
    if _NESTED_COMPACT.search(text, 0, len(text) if merge == -1 else merge) is not None:
        return "nested compact sequences"
    if merge != -1:
        return "merge key"
    return None


def _first_merge_key(text: str) -> int:
    """text.find("<<"), from each `<` (memchr finds them, and they are few)."""
    at = text.find("<")
    while at != -1 and text[at + 1:at + 2] != "<":
        at = text.find("<", at + 1)
    return at


def _lines_read(words: str) -> tuple[str | None, bool]:
    """What the token check refuses in `words` (the text outside block scalar bodies), and
    whether a flow collection may be a mapping key there (_maybe_collection_key).

    Tokens and comments never span lines, and most lines repeat (`containers:`, `- name:
    http`), in a text and across a chart's files: only lines not passed before are read.
    A flow key found on no line can still span two, from a line that ends in `{` or `,`;
    a line passes only when it has neither (so a text of passed lines has no flow key).
    """
    lines = words.split("\n")
    if _LINES_TAKEN.issuperset(lines):  # no set made when every line passed before
        return None, False
    fresh = set(lines) - _LINES_TAKEN
    distinct = "\n".join(fresh)
    tokens = distinct
    if '"' in distinct or "'" in distinct:
        # Words inside a quoted scalar are text to both libraries, not scalars or syntax:
        # `"0 3 * * *"` holds no alias.
        escapes: list[str] = []
        tokens = "\n".join(_unquoted(line, escapes) if '"' in line or "'" in line else line
                           for line in fresh)
        for quoted in escapes:
            if not _same_quoted(quoted):
                return f"quoted scalar {quoted[:40]!r} reads differently", True
    uncommented = _without_comments(tokens) if "#" in tokens else tokens
    verdicts = _VERDICTS
    for token in frozenset(uncommented.split()):
        verdict = verdicts.get(token)
        if verdict is None:
            verdict = _token_ok(token)
        if not verdict:
            return f"token {token[:40]!r} reads differently in YAML 1.1", True
    if "\n..." in distinct or distinct.startswith("..."):  # a line starting with `...`
        return "document end marker", True
    if _maybe_collection_key(distinct) or _FLOW_GOES_ON.search(distinct) is not None:
        return None, _maybe_collection_key(words)  # asked of the text as it stands
    if len(_LINES_TAKEN) < _LINES_TAKEN_LIMIT:
        _LINES_TAKEN.update(line for line in fresh if len(line) <= 200)
    return None, False


_QUOTE = re.compile("[\"']")
_QUOTED_ENDS = frozenset(" ,]}:")
"""What may follow a quoted scalar's closing quote on its line (or the line's end)."""


def _unquoted(line: str, escapes: list[str]) -> str:
    """The line with the inside of each quoted scalar that opens where a node starts and
    closes on this line blanked (its quotes kept, the length unchanged); the line as it
    stands from the first quote that does not (a multi-line scalar, a quote inside a plain
    scalar). Double-quoted scalars with a backslash go to `escapes`: their escapes are read
    by both libraries (_same_quoted)."""
    pieces: list[str] = []
    at = 0
    found = _QUOTE.search(line)
    while found is not None:
        start = found.start()
        before = line[:start].rstrip(" ")
        spaced = len(before) < start
        last = before[-1:]
        if not (not before or last in "[{," or (spaced and last == ":")
                or (spaced and last == "-" and before[-2:-1] in ("", " "))):
            break  # not where a node starts: text of a plain scalar (`it's`)
        quote = line[start]
        end = start + 1
        while True:
            end = line.find(quote, end)
            if end == -1:
                break
            if quote == '"':
                slashes = len(line[start + 1:end]) - len(line[start + 1:end].rstrip("\\"))
                if slashes % 2 == 0:
                    break
            elif line[end + 1:end + 2] != "'":
                break
            else:
                end += 1  # '' inside a single-quoted scalar
            end += 1
        if end == -1 or (end + 1 < len(line) and line[end + 1] not in _QUOTED_ENDS):
            break
        if quote == '"' and "\\" in line[start:end]:
            escapes.append(line[start:end + 1])
        pieces.append(line[at:start + 1])
        pieces.append(" " * (end - start - 1))
        at = end
        found = _QUOTE.search(line, end + 1)
    pieces.append(line[at:])
    return "".join(pieces)


_QUOTED_VERDICTS: dict[str, bool] = {}


def _same_quoted(scalar: str) -> bool:
    """Whether PyYAML and yaml-rs read a double-quoted scalar (with escapes) alike."""
    verdict = _QUOTED_VERDICTS.get(scalar)
    if verdict is None:
        import yaml  # only for escapes in double quotes: a plain input never loads PyYAML

        text = f"k: {scalar}\n"
        try:
            ours = yaml.load(text, Loader=yaml.CSafeLoader)
            theirs = yaml_rs.loads(text, parse_datetime=False)
        except Exception:  # any error in either: not the same reading
            verdict = False
        else:
            verdict = type(ours) is type(theirs) and ours == theirs
        if len(_QUOTED_VERDICTS) < _VERDICT_LIMIT:
            _QUOTED_VERDICTS[scalar] = verdict
    return verdict


def _unquoted_text(text: str) -> str:
    """The text with the quoted scalars _unquoted finds blanked on the lines that hold a `*`
    (the only ones the alias checks read), offsets kept."""
    pieces: list[str] = []
    at = 0
    star = text.find("*")
    while star != -1:
        start = text.rfind("\n", 0, star) + 1
        end = text.find("\n", star)
        if end == -1:
            end = len(text)
        pieces.append(text[at:start])
        pieces.append(_unquoted(text[start:end], []))
        at = end
        star = text.find("*", end)
    pieces.append(text[at:])
    return "".join(pieces)


_FLOW_GOES_ON = re.compile(r"[{,] *$", re.M)
"""A line ending in `{` or `,` (then spaces): a flow collection may go on to the next."""


def _block_scalars(text: str) -> str | list[str] | None:
    """The text cut around its block scalars' bodies (pieces outside and bodies, in turn),
    None when it has none, or why one is left to libyaml.

    yaml-rs and libyaml read a block scalar alike when it has content and its first line
    is not blank (an empty one is "" to PyYAML and a line break to yaml-rs; leading blank
    lines indented past the first line are an error to yaml-rs only): tests/check/
    test_rsyaml.py compares them. The body is every following line that is blank or
    indented at least as much as its first line; it must end at a line indented no more
    than the header's node.
    """
    # An indicator anywhere else (`|2`, `|x`) is a token the token check refuses; one at a
    # line's start (a document's root, `--- |`) is not a form taken here.
    if _indicator_at_line_start(text):
        return "block scalar in an unusual form"
    kept: list[str] = []
    at = 0
    for tail in _tails(text):
        if tail.start() < at:
            continue  # a line inside a body already skipped
        start = text.rfind("\n", 0, tail.start()) + 1
        head = _HEAD.match(text, start)
        assert head is not None  # both groups may be empty
        indent, dashes = head.group(1), head.group(2)
        key = text[head.end():tail.start() + 1]
        if key and not key.endswith(": "):
            return "block scalar in an unusual form"
        if key:
            parent = len(indent) + len(dashes)
        elif dashes:
            parent = len(indent) + len(dashes.rstrip()) - 1
        else:
            return "block scalar in an unusual form"
        if not tail.group().endswith("\n"):
            return "empty block scalar"
        body = tail.end()
        if body >= len(text):
            return "empty block scalar"
        line_end = text.find("\n", body)
        first = text[body:line_end if line_end != -1 else len(text)]
        content = len(_INDENT.match(first).group())  # type: ignore[union-attr]
        if not first.strip() or content <= parent:
            return "empty block scalar, or one starting with a blank line"
        found = _body_end(content).search(text, body)
        end = len(text) if found is None else found.start() + 1
        if found is None and not text.endswith("\n"):
            # PyYAML ends such a scalar without a line break, yaml-rs with one.
            return "block scalar at the end of the text, without a line break"
        if found is not None and len(found.group()) - 2 > parent:
            return "block scalar ends at an odd indentation"
        kept.append(text[at:body])
        kept.append(text[body:end])
        at = end
    kept.append(text[at:])
    return kept if len(kept) > 1 else None


def _indicator_at_line_start(text: str) -> bool:
    """Whether a `|` or `>` starts a line or follows `-- ` (`--- |`). Looked for from each
    indicator, which memchr finds and which are few: a search for a two-character string
    is several times slower than memchr over the whole text."""
    for indicator in "|>":
        at = text.find(indicator)
        while at != -1:
            if at == 0 or text[at - 1] == "\n" or (at >= 3 and text[at - 3:at] == "-- "):
                return True
            at = text.find(indicator, at + 1)
    return False


def _tails(text: str) -> Iterator[re.Match[str]]:
    """_TAIL's matches, as finditer gives them, tried only where a `|` or `>` is (found by
    a find in C): finditer tries every space, and indentation is mostly spaces."""
    end = 0  # matches do not overlap: the next one starts at or after the last one's end
    pipe, fold = text.find("|"), text.find(">")
    while pipe != -1 or fold != -1:
        at = pipe if fold == -1 or (pipe != -1 and pipe < fold) else fold
        if at > end:
            tail = _TAIL.match(text, at - 1)
            if tail is not None:
                end = tail.end()
                yield tail
        if at == pipe:
            pipe = text.find("|", at + 1)
        else:
            fold = text.find(">", at + 1)


@lru_cache(maxsize=256)
def _body_end(content: int) -> re.Pattern[str]:
    """The first line indented less than `content` with something on it (its indentation
    is the match's length minus the line break and the character)."""
    return re.compile(f"\n[ ]{{0,{content - 1}}}[^ \n]")


MAX_REPLAYED_EVENTS = 1_000_000
"""yaml-rs refuses input whose aliases replay more events than this (an alias bomb), and
the libyaml path then reports it as before. So a document read here expands to at most its
own nodes (fewer than its characters) plus this many."""
_DUPLICATES = yaml_rs.DuplicateKeyPolicy.Error if AVAILABLE else None
_LIMITS = yaml_rs.AliasLimits(max_total_replayed_events=MAX_REPLAYED_EVENTS) if AVAILABLE else None


def _load(chunk: str) -> Any:
    try:
        return yaml_rs.loads(chunk, parse_datetime=False, duplicate_key_policy=_DUPLICATES,
                             alias_limits=_LIMITS)
    except (yaml_rs.YAMLDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise Unsupported(f"yaml-rs: {str(exc).splitlines()[0] if str(exc) else exc}") from None


_MAYBE_COLLECTION_KEY = tuple(re.compile(p) for p in (
    r"\{[ \n]*[{\[]", r",[ \n]*[{\[]", r"\}[ ]*:", r"\][ ]*:"))
"""Where a flow collection might be a mapping key: one right after `{` or `,`, or a `}` or
`]` followed by `:`. Text without any needs no walk over its objects. (Four patterns that
each start with a literal are searched quicker than one alternation.)"""


def _maybe_collection_key(text: str) -> bool:
    return any(pattern.search(text) is not None for pattern in _MAYBE_COLLECTION_KEY)


def _collection_key(data: object) -> bool:
    stack = [data]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            for key in item:
                if type(key) in (tuple, frozenset, list, dict):
                    return True
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _has_alias(text: str, start: int, end: int) -> bool:
    """Whether an alias (`*name` where a node may start) is in text[start:end]."""
    at = text.find("*", start, end)
    while at != -1:
        if at == 0 or text[at - 1] in " \n[{,":
            return True
        at = text.find("*", at + 1, end)
    return False


_QUOTES = re.compile("[\"']")
@lru_cache(maxsize=256)
def _node_end(indent: int, entry: bool) -> re.Pattern[str]:
    """A line that ends a block node anchored on a line indented `indent`: one indented less
    or, for a mapping value, as much but not a `- ` entry (an indentless sequence)."""
    less = f" {{0,{indent - 1}}}[^ \n#]|" if indent else ""
    same = f" {{{indent}}}[^ \n#]" if entry else f" {{{indent}}}[^ \n#-]"
    return re.compile(f"\n(?:{less}{same})")


def _recursive_alias(text: str) -> str | None:
    """Why an alias might lie inside its own anchored node, or None when none can.

    yaml-rs reads such an alias as null where PyYAML builds a cycle. Checked on block
    structure only: with flow collections or quoted text inside the anchored node,
    indentation no longer tells where the node ends.
    """
    if text.count("[") != text.count("[]") or text.count("{") != text.count("{}"):
        return "aliases with flow collections"
    at = text.find("*")
    while at != -1:
        if at == 0 or text[at - 1] in " \n":
            name = _NAME.match(text, at + 1)
            if name is None:
                return "alias with an unusual name"
            anchor = text.rfind("&" + name.group(), 0, at)
            size = 1 + len(name.group())  # `&name`; the character after it is sliced
            while anchor > 0 and (text[anchor - 1] not in " \n"  # alone, not the text's rest
                                  or text[anchor + size:anchor + size + 1] not in " \n"):
                anchor = text.rfind("&" + name.group(), 0, anchor)
            if anchor <= 0:
                return "alias before its anchor"
            line_start = text.rfind("\n", 0, anchor) + 1
            line_end = text.find("\n", anchor)
            if line_end == -1 or line_end > at:
                return "alias on its anchor's line"
            rest = text[anchor + 1 + len(name.group()):line_end].strip()
            if ": " in rest or rest.endswith(":"):
                return "anchor before a key"  # on the key, or on a compact mapping?
            if not rest or rest[0] == "#":  # a block node follows: where does it end?
                prefix = text[line_start:anchor]
                indent = len(prefix) - len(prefix.lstrip(" "))
                head = prefix.strip()
                if head == "-":
                    end = _node_end(indent, True).search(text, line_end, at)
                elif head.endswith(":"):
                    end = _node_end(indent, False).search(text, line_end, at)
                else:
                    return "anchor on a key"
                if end is None or _QUOTES.search(text, line_end, end.start()) is not None:
                    return "alias inside (or maybe inside) its anchored node"
        at = text.find("*", at + 1)
    return None


def _separators(text: str) -> list[int]:
    """Offsets of the `---` lines; Unsupported if one has content after the marker."""
    found = [0] if text.startswith("---") else []
    at = text.find("\n---")
    while at != -1:
        found.append(at + 1)
        at = text.find("\n---", at + 1)
    for at in found:  # most are `---` alone on their line
        if text[at + 3:at + 4] != "\n" and _SEPARATOR.match(text, at) is None:
            raise Unsupported("document marker with content on its line")
    return found


def documents(text: str) -> list[tuple[Any, int, int, bool, tuple[int, int]]]:
    """(object, first line, last line, has aliases) per document, as fastyaml.documents gives
    them, and where those lines are in the text (the gate takes no line break but \\n: they
    are text.splitlines()[first - 1:last]); raise Unsupported (before yielding anything) for
    input the gate refuses."""
    why, structure, keys = _gate(text)
    if why is not None:
        raise Unsupported(why)
    count, content = text.count, _CONTENT.search
    aliases = "*" in structure and _has_alias(structure, 0, len(structure))
    if aliases and ('"' in structure or "'" in structure):
        # A `*` inside a quoted scalar (a cron schedule) is text, not an alias.
        structure = _unquoted_text(structure)
        aliases = _has_alias(structure, 0, len(structure))
    if aliases:
        why = _recursive_alias(structure)
        if why is not None:
            raise Unsupported(why)
    # Segments of text between `---` lines, each with its 1-based first line; all but the
    # first begin with their `---` line.
    bounds = [0, *_separators(text), len(text)]
    if bounds[1] == 0:
        bounds.pop(0)  # the text starts with `---`: no implicit first document
        explicit_first = True
    else:
        explicit_first = False
    ends_line = text.endswith("\n")
    # (first line, last line, has aliases, span): the last line is the next `---` line, or
    # the text's last line (splitlines drops what follows a final line break).
    found: list[tuple[int, int, bool, tuple[int, int]]] = []
    segments = len(bounds) - 1
    first = 1  # the segment's first line
    for n in range(segments):
        start, end = bounds[n], bounds[n + 1]
        following = first + count("\n", start, end)  # the next segment's first line
        marker = explicit_first or n > 0
        body = start
        if marker:
            body = text.find("\n", start, end) + 1 or end  # past the `---` line
        if n + 1 < segments:  # the last line is the next `---` line, from `end` to `stop`
            last, stop = following, text.find("\n", end)
            if stop == -1:
                stop = len(text)
            last_at = end
        else:  # the stream's end: libyaml ends it on a fresh line, after the last line
            # break or one line on
            last = following + (0 if ends_line else 1)
            stop = len(text) - 1 if ends_line else len(text)
            last_at = stop
        if body < end and text[body] not in _NO_NODE:  # the usual case: a node right there
            at, line = body, first + (body != start)  # past the `---` line, or none
        else:  # blank lines or comments first, or nothing at all
            node = content(text, body, end)
            at = -1 if node is None else node.start()
            line = first + count("\n", start, at)
        if at != -1:
            found.append((line, last, aliases and _has_alias(structure, body, end), (at, stop)))
        elif marker:  # `---` with nothing after it: an empty document, placed (as libyaml
            found.append((last, last, False, (last_at, stop)))  # its empty node) at the next token
        first = following
    if not found:
        return []
    data = _load(text)
    docs = data if len(found) > 1 else [data]
    if not isinstance(docs, list) or len(docs) != len(found):
        raise Unsupported("yaml-rs saw other documents")
    if keys and _collection_key(docs):
        # `{{ x }}` (a Helm template) is a mapping with a mapping as its key: PyYAML refuses
        # it, yaml-rs makes a frozenset. Only a flow mapping can hide such a key.
        raise Unsupported("collection as a mapping key")
    return [(doc, a, b, c, d) for doc, (a, b, c, d) in zip(docs, found, strict=True)]
