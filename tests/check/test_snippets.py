"""The fix snippets' emitter writes what PyYAML's dumper writes, and reads back as the value
(issue 31: a dump per finding was ~15 % of a findings-heavy run)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drainsafe.check.snippets import WIDTH, dump, dump_named, dump_once, emit

WORDS = st.one_of(
    st.sampled_from(["name", "vllm", "--port", "--shutdown-timeout=90", "8000", "1", "true",
                     "yes", "no", "null", "~", "", "1:30", "0777", "1e3", "-1", "-", "--",
                     "a b", "a: b", "a:b", "key:", "#x", "x #y", "'q'", '"d"', "*a", "&a",
                     "!t", "%x", "@x", "=", "[x]", "{x}", "x,y", "2024-01-15", "é",
                     "sh -c sleep 10", "http://x/y", "nvidia.com/gpu", "64Gi", "500m",
                     "a  b", " a", "a ", "x" * 70, "word " * 20, "a\nb", "$patch", "$",
                     "a$b", "sh -c 'x'\nexec y --z\n", "x\n\ny", "\nx", "x\n", "a \nb",
                     "a\n b", "x" * 95 + "\ny", "y\n" + "x " * 48]),
    st.text(alphabet="ab1-_.:/ #'\"=@+$\n", max_size=12),
)
SCALARS = st.one_of(WORDS, st.integers(-10**6, 10**6), st.booleans(), st.none(),
                    st.floats(allow_nan=False))
NODES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(WORDS, inner, max_size=4)), max_leaves=12)


# Nearly all of an example's cost is hypothesis drawing the nested value (~6 ms; the
# emitter, both dumps and the read-back ~1 ms), so no example can be made much cheaper:
# fewer are drawn. Per property, back to back on the shared 2-core machine: 1500 examples
# (before) 10-12 s, 1000 5.5 s, 500 3.3-3.5 s. 500 dictionaries still hold each of WORDS'
# ~50 chosen strings 30 times or more (20 or more as a key), at several depths, and each
# run draws new ones (no example database is kept between CI runs).
EMITTER = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _pyyaml(node: Any) -> str:
    # What dump() called before the emitter: the C dumper (it differs from the pure-Python
    # one on a few keys, e.g. '').
    return yaml.dump(node, Dumper=yaml.CSafeDumper, sort_keys=False, default_flow_style=False,
                     width=WIDTH).rstrip("\n")


@EMITTER
@given(st.dictionaries(WORDS, NODES, min_size=1, max_size=4))
def test_emitter_writes_what_pyyaml_writes(node: dict[str, Any]) -> None:
    text = emit(node)
    if text is not None:
        assert text == _pyyaml(node), node
        assert yaml.safe_load(text) == node  # the round trip through the YAML reader
    assert dump(node) == _pyyaml(node)


def test_fix_shapes_are_emitted() -> None:
    # The shapes rules write are taken, not left to PyYAML.
    for node in (
        {"spec": {"maxUnavailable": 1, "minAvailable": None}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "web", "namespace": "fleet-1"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
        {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 135, "containers": [
            {"name": "vllm", "args": ["--model", "m", "--port", "8000",
                                      "--shutdown-timeout=120"],
             "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
             "livenessProbe": {"httpGet": None, "tcpSocket": {"port": 8000}}}]}}}},
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {
            "maxSurge": 0, "maxUnavailable": 1}}}},
        # A script in args, a command's `--`, a strategic-merge `$patch` (bench/'s
        # findings-heavy corpus: the last fixes left to PyYAML's dumper).
        {"spec": {"template": {"spec": {"containers": [{"name": "triton", "args": [
            "aws s3 sync s3://models/team-0 /models\nexec tritonserver --exit-timeout-secs=200\n"
        ], "command": ["drainsafe", "run", "--", "tritonserver"]}, {
            "name": "istio-proxy", "$patch": "delete"}]}}}},
    ):
        assert emit(node) == _pyyaml(node)


SAFE_WORDS = st.one_of(
    st.text(alphabet="abz019-_./:=@+$ \n", min_size=1, max_size=14),
    st.sampled_from(["1", "0777", "1e3", "true", "no", "~", "null", "1:30", "2024-01-15",
                     "--port", "-1", "x:", "=", "a" * 61 + " b", "...", "---x"]),
)
SAFE_NODES = st.recursive(
    st.one_of(SAFE_WORDS, st.integers(-10**6, 10**6), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(SAFE_WORDS, inner, max_size=4)), max_leaves=12)


@EMITTER
@given(st.dictionaries(SAFE_WORDS, SAFE_NODES, min_size=1, max_size=4))
@example({"0b_": None, "v": "0x_"})  # read as ints PyYAML cannot build: quoted, not a crash
def test_emitter_on_names_and_numbers(node: dict[str, Any]) -> None:
    # The values fixes hold: names, flags, numbers; most of these are emitted, not dumped.
    text = emit(node)
    if text is not None:
        assert text == _pyyaml(node), node
        assert yaml.safe_load(text) == node
    assert dump(node) == _pyyaml(node)


@pytest.mark.parametrize("shared", [{"app": "debug"}, ["a", "b"], {"x": {"y": 1}}])
def test_a_collection_met_twice_gets_pyyaml_anchors(shared: Any) -> None:
    # The Deployment that replaces a bare Pod shares its labels between selector and
    # template: PyYAML writes an anchor and aliases, and so does the emitter.
    other = {"k": 1}
    for node in (
        {"selector": {"matchLabels": shared}, "template": {"labels": shared}},
        {"a": [{"s": shared}, {"t": shared}], "b": shared},
        {"a": other, "b": {"c": shared, "d": other}, "e": [{"s": shared}], "f": shared},
    ):
        assert emit(node) is not None
        assert emit(node) == _pyyaml(node), node
        assert yaml.safe_load(emit(node) or "") == node
    assert emit({"a": [], "b": []}) == _pyyaml({"a": [], "b": []})  # distinct, not shared
    empty: dict[str, Any] = {}
    node = {"shared-x": empty, "shared-y": empty}  # keys no other test dumps (dump caches)
    assert emit(node) is None  # PyYAML's `&id001 {}`: left to it
    assert dump(node) == _pyyaml(node)


def test_dumps_of_equal_values_shared_otherwise_are_not_mixed_up() -> None:
    # dump()'s memo: the same content with a collection met twice (anchors) and with two
    # equal ones (none), in both orders, each its own text (keys no other test dumps).
    for first_shared in (True, False):
        for shared in (first_shared, not first_shared):
            inner = ["memo-a", "memo-b"]
            node = {"memo-one": inner, "memo-two": inner if shared else list(inner),
                    "memo-order": first_shared}
            assert dump(node) == dump_once(node) == _pyyaml(node)
            assert ("&id001" in dump(node)) is shared


def _budget(name: str, namespace: str, labels: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORDS | st.just("x7f3a-object-name"), WORDS | st.just("x7f3a-object-ns"),
       st.dictionaries(WORDS, WORDS | st.just("x7f3a-object-name"), max_size=3))
def test_names_filled_in_are_the_whole_dump(name: str, namespace: str,
                                            labels: dict[str, Any]) -> None:
    # Stand-ins written once, names put in after: the very text dump() writes of the whole,
    # for names it writes plain, quoted or leaves to PyYAML, and labels holding a stand-in.
    assert dump_named(_budget, name, namespace, labels) == dump(_budget(name, namespace, labels))


def _deployment(name: str, namespace: str, labels: dict[str, Any], pod: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORDS, WORDS, st.dictionaries(WORDS, WORDS, max_size=2),
       st.dictionaries(WORDS, NODES, max_size=3), st.sampled_from(["none", "labels", "itself"]))
def test_a_tail_put_in_is_the_whole_dump(name: str, namespace: str, labels: dict[str, Any],
                                         pod: dict[str, Any], share: str) -> None:
    # A tail emitted apart from its stand-in's text: the very text of the whole, for tails
    # emit() writes, leaves to PyYAML, or that share a collection (anchors: dumped whole).
    if share == "labels":
        pod = {**pod, "labels": labels}
    elif pod and share == "itself":
        pod = {**pod, "again": next(iter(pod.values()))}
    assert dump_named(_deployment, name, namespace, labels, tail=pod) == \
        dump(_deployment(name, namespace, labels, pod))


def test_equal_tails_shared_otherwise_are_not_mixed_up() -> None:
    # _tail's memo: the same content with a collection shared (anchors: dumped whole) and
    # not shared (filled in), in both orders, each the whole dump's text.
    labels = {"app": "tail-memo"}
    for first_shared in (True, False):
        for shared in (first_shared, not first_shared):
            inner = ["a", "b"]
            pod = {"one": inner, "two": inner if shared else list(inner),
                   "order": first_shared}
            # dump_once: the whole text without any memo
            assert dump_named(_deployment, "n", "ns", labels, tail=pod) == \
                dump_once(_deployment("n", "ns", labels, pod))
