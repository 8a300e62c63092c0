"""check.namespaces: a file as one worker reads it keeps every document's index and every
line's number, and holds exactly that worker's objects (read with the same reader)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from drainsafe.check.load import Document, Loaded, SourceText, take
from drainsafe.check.model import namespace_of
from drainsafe.check.namespaces import assign, segments, view

NAMESPACES = ["a", "b", "team-1", "default"]


@st.composite
def documents(draw: st.DrawFn) -> str:
    """One document's text: block or flow style, its namespace named or not, with
    comments and blank lines around it; or no node at all."""
    shape = draw(st.sampled_from(["block", "flow", "comment", "empty", "unnamed"]))
    namespace = draw(st.sampled_from(NAMESPACES))
    name = draw(st.sampled_from(["web", "llm", "x1"]))
    lead = draw(st.sampled_from(["", "# Source: chart/templates/a.yaml\n", "\n", "  # c\n\n"]))
    if shape == "block":
        body = (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n"
                f"  namespace: {namespace}\nspec:\n  selector: {{app: {name}}}\n")
    elif shape == "flow":
        body = (f'{{"kind": "ConfigMap", "metadata": {{"name": "{name}", '
                f'"namespace": "{namespace}"}}}}\n')
    elif shape == "unnamed":
        body = f"kind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: |\n    line\n    ---x\n"
    elif shape == "comment":
        body = "# nothing here\n"
    else:
        body = ""
    tail = draw(st.sampled_from(["", "\n", "# after\n"]))
    return lead + body + tail


@st.composite
def streams(draw: st.DrawFn) -> str:
    docs = draw(st.lists(documents(), min_size=1, max_size=8))
    first = "" if draw(st.booleans()) else "---\n"  # an implicit first document or not
    text = first + "---\n".join(docs)
    return text if draw(st.booleans()) else text.rstrip("\n")


def _read(text: str) -> Loaded:
    loaded = Loaded()
    take(loaded, SourceText("s.yaml", text))
    assert not loaded.errors
    return loaded


def _placed(d: Document) -> tuple[object, ...]:
    return d.obj, d.doc_index, d.start_line, d.end_line, d.prefix


@settings(max_examples=300, deadline=None)
@given(streams(), st.sets(st.sampled_from(NAMESPACES)))
def test_a_worker_reads_its_documents_where_the_whole_file_has_them(text: str,
                                                                     mine: set[str]) -> None:
    found = segments(text)
    assert found is not None
    whole = _read(text)
    guessed = [s.namespace for s in found if s.namespace is not None]
    assert guessed == [namespace_of(d.obj) for d in whole.documents]
    seen = view(text, found, mine)
    theirs = [_placed(d) for d in whole.documents if namespace_of(d.obj) in mine]
    if seen is None:
        assert theirs == []
        return
    assert seen.count("\n") == text.count("\n")
    read = _read(seen)
    assert [_placed(d) for d in read.documents] == theirs
    # Every other object became a null document: the same count of documents.
    assert (len(read.documents) + read.empty_documents
            == len(whole.documents) + whole.empty_documents)


def test_markers_the_split_cannot_follow_leave_the_text_whole() -> None:
    assert segments("a: 1\n...\n---\nb: 2\n") is None
    assert segments("%YAML 1.1\n---\na: 1\n") is None
    assert segments("a: 1\n--- b\n") is None
    assert segments("a: 1\n----\n") is None
    assert segments("a: 1\n--- # a comment\nb: 2\n") is not None


def test_a_key_that_only_ends_in_namespace_names_none() -> None:
    found = segments("metadata:\n  x-namespace: other\n  namespace: mine\n")
    assert found is not None and [s.namespace for s in found] == ["mine"]
    found = segments("env:\n- {fieldPath: metadata.namespace}\nkind: A\n")
    assert found is not None and [s.namespace for s in found] == ["default"]


def test_namespaces_are_dealt_largest_first_to_the_least_loaded() -> None:
    owner = assign({"a": 50, "b": 30, "c": 30, "d": 10, "e": 5}, 2)
    loads = [sum(size for n, size in {"a": 50, "b": 30, "c": 30, "d": 10, "e": 5}.items()
                 if owner[n] == k) for k in range(2)]
    assert owner["a"] != owner["b"] and abs(loads[0] - loads[1]) <= 10
    assert assign({"x": 1}, 3) == {"x": 0}
