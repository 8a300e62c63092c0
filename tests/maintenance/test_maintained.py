"""spec.maintainedWhen read by parse_spec, and the decision maintenance.maintained.maintained."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.maintenance.cli import (
    CreateFlags,
    FlagError,
    done_refusal,
    done_value,
    manifest_from_flags,
)
from drainsafe.maintenance.maintained import (
    MAINTAINED,
    NodeSeen,
    Recorded,
    done_mark,
    maintained,
    names,
    node_seen,
    record_of,
    stale_mark,
)
from drainsafe.maintenance.progress import NodeProgress, read_nodes, status_of
from drainsafe.maintenance.spec import (
    MaintainedWhen,
    NodeConditionMark,
    SpecError,
    parse_spec,
    version_triple,
)

NAME = "upgrade"


def _spec(when: Any, uncordon: str = "WhenMaintained") -> dict[str, Any]:
    return {"spec": {"nodeNames": ["a"], "uncordon": uncordon, "maintainedWhen": when}}


def test_absent_is_the_annotation_alone_and_each_field_is_read() -> None:
    assert parse_spec({"spec": {"nodeNames": ["a"], "uncordon": "WhenMaintained"}}
                      ).maintained_when == MaintainedWhen()
    when = parse_spec(_spec({"annotation": False, "bootIDChanged": True,
                             "nodeCondition": {"type": "GPUDriverReady"},
                             "kubeletVersion": "v1.32.1"})).maintained_when
    assert when == MaintainedWhen(annotation=False, boot_id_changed=True,
                                  node_condition=NodeConditionMark("GPUDriverReady", "True"),
                                  kubelet_version="v1.32.1")
    assert when.needs_record


@pytest.mark.parametrize(("when", "uncordon", "field"), [
    ({"bootIDChanged": True}, "Immediately", "maintainedWhen: only with uncordon"),
    ({"annotation": False}, "WhenMaintained", "maintainedWhen: nothing would mark"),
    ({"nodeCondition": {"status": "True"}}, "WhenMaintained", "maintainedWhen.nodeCondition.type"),
    ({"nodeCondition": {"type": "X", "status": "yes"}}, "WhenMaintained",
     "maintainedWhen.nodeCondition.status"),
    ({"kubeletVersion": "latest"}, "WhenMaintained", "maintainedWhen.kubeletVersion"),
    ({"bootIDChanged": "yes"}, "WhenMaintained", "maintainedWhen.bootIDChanged"),
    ({"rebooted": True}, "WhenMaintained", "maintainedWhen: unknown field 'rebooted'"),
    ("bootIDChanged", "WhenMaintained", "maintainedWhen: an object"),
])
def test_a_wrong_maintained_when_is_refused_naming_the_field(
        when: Any, uncordon: str, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        parse_spec(_spec(when, uncordon))


def test_versions_compare_by_release_ignoring_a_distribution_suffix() -> None:
    assert version_triple("v1.33.0-eks-1234") == (1, 33, 0)
    assert version_triple("1.9.10") == (1, 9, 10)
    assert version_triple("changed") is None


def _node(uid: str = "u1", boot: str = "b1", version: str = "v1.31.0",
          annotations: dict[str, str] | None = None,
          conditions: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "a", "uid": uid, "annotations": annotations or {}},
            "status": {"nodeInfo": {"bootID": boot, "kubeletVersion": version},
                       "conditions": [{"type": t, "status": s}
                                      for t, s in (conditions or {}).items()]}}


BEFORE = record_of(node_seen(_node()))


@pytest.mark.parametrize(("node", "when", "expected"), [
    (_node(), MaintainedWhen(), (False, "AwaitingMaintenance")),
    (_node(annotations={MAINTAINED: NAME}), MaintainedWhen(), (True, "Annotated")),
    (_node(annotations={MAINTAINED: "other"}), MaintainedWhen(), (False, "AwaitingMaintenance")),
    (_node(annotations={MAINTAINED: NAME}),
     MaintainedWhen(annotation=False, boot_id_changed=True), (False, "AwaitingMaintenance")),
    (_node(boot="b2"), MaintainedWhen(boot_id_changed=True), (True, "Rebooted")),
    (_node(boot="b2"), MaintainedWhen(), (False, "AwaitingMaintenance")),
    (_node(uid="u2"), MaintainedWhen(boot_id_changed=True), (True, "Replaced")),
    (_node(version="v1.32.1"), MaintainedWhen(kubelet_version="changed"),
     (True, "KubeletUpgraded")),
    (_node(version="v1.32.0"), MaintainedWhen(kubelet_version="v1.32.1"),
     (False, "AwaitingMaintenance")),
    (_node(version="v1.32.1-lab"), MaintainedWhen(kubelet_version="v1.32.1"),
     (True, "KubeletUpgraded")),
    # a replacement from an old image does not meet a minimum version, but is "changed"
    (_node(uid="u2"), MaintainedWhen(kubelet_version="v1.32.1"),
     (False, "AwaitingMaintenance")),
    (_node(uid="u2"), MaintainedWhen(kubelet_version="changed"), (True, "Replaced")),
    (_node(conditions={"GPUDriverReady": "True"}),
     MaintainedWhen(node_condition=NodeConditionMark("GPUDriverReady")), (True, "Condition")),
    (_node(conditions={"GPUDriverReady": "False"}),
     MaintainedWhen(node_condition=NodeConditionMark("GPUDriverReady")),
     (False, "AwaitingMaintenance")),
    (None, MaintainedWhen(boot_id_changed=True), (False, "NodeGone")),
])
def test_each_mark(node: dict[str, Any] | None, when: MaintainedWhen,
                   expected: tuple[bool, str]) -> None:
    seen = None if node is None else node_seen(node)
    assert maintained(seen, BEFORE, when, NAME) == expected


EARLY = record_of(node_seen(_node(annotations={MAINTAINED: NAME})))  # marked before the drain


@pytest.mark.parametrize(("value", "recorded", "expected"), [
    # set before the drain ended (kubectl annotate early, a leftover): recorded, not counted
    (NAME, EARLY, False),
    # set again since, with another value: `done`'s, or kubectl's with a note
    (f"{NAME}/2026-12-07T01:00:00Z", EARLY, True),
    (f"{NAME}/CHG-1234", EARLY, True),
    # nothing there at the drain's end: the plain name counts, as documented
    (NAME, BEFORE, True),
    (f"{NAME}/CHG-1234", BEFORE, True),
    # another operation's name, or one that only begins with this one's, never counts
    ("other", BEFORE, False),
    (f"{NAME}x", BEFORE, False),
    (f"other/{NAME}", BEFORE, False),
    # a recorded mark of another operation does not hide this one's
    (NAME, record_of(node_seen(_node(annotations={MAINTAINED: "other"}))), True),
])
def test_the_annotation_counts_only_if_set_after_the_drain(
        value: str, recorded: Recorded, expected: bool) -> None:
    node = node_seen(_node(annotations={MAINTAINED: value}))
    assert maintained(node, recorded, MaintainedWhen(), NAME) == (
        (True, "Annotated") if expected else (False, "AwaitingMaintenance"))


def test_an_early_mark_is_recorded_and_said_and_a_replacement_carries_none_of_it() -> None:
    assert EARLY.maintained == NAME
    assert EARLY.as_status()["maintained"] == NAME
    assert Recorded.of_status(EARLY.as_status()) == EARLY
    assert "maintained" not in BEFORE.as_status()
    note = stale_mark(EARLY, MaintainedWhen(), NAME)
    assert note is not None and f"{MAINTAINED}={NAME}" in note and "done" in note
    assert stale_mark(BEFORE, MaintainedWhen(), NAME) is None
    assert stale_mark(EARLY, MaintainedWhen(annotation=False, boot_id_changed=True),
                      NAME) is None
    # a new Node object under the name was annotated after the drain, whatever its value
    replacement = node_seen(_node(uid="u2", annotations={MAINTAINED: NAME}))
    assert maintained(replacement, EARLY, MaintainedWhen(), NAME) == (True, "Annotated")


def test_done_writes_a_mark_that_counts_whatever_was_recorded() -> None:
    now = 1_796_000_000.25
    plain = done_mark(NAME, now)
    assert plain.startswith(f"{NAME}/") and names(plain, NAME)
    for recorded in ("", NAME, plain, "other"):
        value = done_mark(NAME, now, recorded)
        assert value != recorded and names(value, NAME)
        node = node_seen(_node(annotations={MAINTAINED: value}))
        before = record_of(node_seen(_node(annotations={MAINTAINED: recorded})))
        assert maintained(node, before, MaintainedWhen(), NAME) == (True, "Annotated")
    # `done` reads the recorded value from the node's status row
    obj = {"metadata": {"name": NAME}, "status": {"nodes": [
        {"name": "a", "state": "AwaitingMaintenance", "recorded": {"maintained": plain}}]}}
    assert done_value(obj, "a", now) not in (plain, NAME)


def test_without_a_record_no_change_can_be_told() -> None:
    when = MaintainedWhen(boot_id_changed=True, kubelet_version="changed")
    assert maintained(node_seen(_node(boot="b2", uid="u2")), None, when, NAME) == (
        False, "AwaitingMaintenance")


def test_the_record_survives_the_status_a_new_leader_reads() -> None:
    row = NodeProgress("a").to("AwaitingMaintenance", "Drained", recorded=BEFORE)
    status = status_of([row], "WhenMaintained", False, 1, 1)
    assert status["nodes"][0]["recorded"] == {"uid": "u1", "bootID": "b1",
                                              "kubeletVersion": "v1.31.0"}
    again = read_nodes(status)["a"]
    assert again.recorded == BEFORE
    # a later step keeps it
    assert again.to("Drained", "Maintained").recorded == BEFORE


texts = st.sampled_from(["", "a", "b"])
marks = st.sampled_from(["", NAME, f"{NAME}/t1", f"{NAME}/t2", "x"])
seen_nodes = st.builds(NodeSeen, uid=texts, boot_id=texts, kubelet_version=st.sampled_from(
    ["", "v1.31.0", "v1.32.1", "v2.0.0"]), maintained_for=marks,
    conditions=st.dictionaries(st.sampled_from(["C", "D"]),
                               st.sampled_from(["True", "False", "Unknown"])))
records = st.none() | st.builds(Recorded, uid=texts, boot_id=texts,
                                kubelet_version=st.sampled_from(["", "v1.31.0", "v1.32.1"]),
                                maintained=marks)
whens = st.builds(MaintainedWhen, annotation=st.booleans(),
                  node_condition=st.none() | st.builds(NodeConditionMark, st.just("C")),
                  boot_id_changed=st.booleans(),
                  kubelet_version=st.sampled_from([None, "changed", "v1.32.1"]))


@given(seen_nodes, records, whens)
def test_properties(node: NodeSeen, recorded: Recorded | None, when: MaintainedWhen) -> None:
    ok, why = maintained(node, recorded, when, NAME)
    # the node as it was recorded, unmarked, is never maintained by a change-mark
    same = maintained(NodeSeen(recorded.uid, recorded.boot_id, recorded.kubelet_version),
                      recorded, MaintainedWhen(annotation=when.annotation,
                                               boot_id_changed=when.boot_id_changed,
                                               kubelet_version=None if when.kubelet_version
                                               != "changed" else "changed"),
                      NAME) if recorded is not None else (False, "")
    assert not same[0]
    # more marks never un-maintain a node (any one is enough)
    wider = MaintainedWhen(annotation=True, node_condition=when.node_condition or
                           NodeConditionMark("C"), boot_id_changed=True,
                           kubelet_version=when.kubelet_version or "changed")
    if ok:
        assert maintained(node, recorded, wider, NAME)[0]
    # the annotation the node already carried when its drain ended never counts
    if recorded is not None and node.uid == recorded.uid \
            and node.maintained_for == recorded.maintained:
        assert why != "Annotated"
    # a mark that is off is never the reason
    assert why != "Annotated" or when.annotation
    assert why != "Condition" or when.node_condition is not None
    assert why != "Rebooted" or when.boot_id_changed
    assert why != "KubeletUpgraded" or when.kubelet_version is not None
    assert maintained(None, recorded, when, NAME) == (False, "NodeGone")


def test_create_flags_write_maintained_when_and_errors_name_the_flag() -> None:
    obj = manifest_from_flags(CreateFlags(
        name=NAME, nodes=("a",), uncordon="WhenMaintained", when_rebooted=True,
        when_condition="GPUDriverReady", when_kubelet_version="v1.32.1", no_annotation=True))
    assert obj["spec"]["maintainedWhen"] == {
        "annotation": False, "nodeCondition": {"type": "GPUDriverReady", "status": "True"},
        "bootIDChanged": True, "kubeletVersion": "v1.32.1"}
    assert "maintainedWhen" not in manifest_from_flags(
        CreateFlags(name=NAME, nodes=("a",), uncordon="WhenMaintained"))["spec"]
    with pytest.raises(FlagError, match="--when-kubelet-version"):
        manifest_from_flags(CreateFlags(name=NAME, nodes=("a",), uncordon="WhenMaintained",
                                        when_kubelet_version="newest"))
    with pytest.raises(FlagError, match="--when-condition"):
        manifest_from_flags(CreateFlags(name=NAME, nodes=("a",), uncordon="WhenMaintained",
                                        when_condition="X=maybe"))
    with pytest.raises(FlagError, match="only with uncordon"):
        manifest_from_flags(CreateFlags(name=NAME, nodes=("a",), when_rebooted=True))


def test_done_is_refused_when_the_annotation_does_not_count() -> None:
    obj = {"metadata": {"name": NAME}, "spec": {
        "uncordon": "WhenMaintained", "maintainedWhen": {"annotation": False,
                                                         "bootIDChanged": True}},
        "status": {"nodes": [{"name": "a", "state": "AwaitingMaintenance"}]}}
    assert "annotation: false" in (done_refusal(obj, "a") or "")
    obj["spec"]["maintainedWhen"]["annotation"] = True
    assert done_refusal(obj, "a") is None


def _crd_schema() -> dict[str, Any]:
    import pathlib

    import yaml

    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2]
                          / "deploy/controller/nodemaintenance-crd.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_schema_defaults_prunes_and_validates_maintained_when() -> None:
    """The structural schema as the (lab's) API server applies it: defaults filled, the
    record kept in the status, a wrong version or a condition without type refused."""
    from drainsafe.lab.apiserver import crdschema

    schema = _crd_schema()
    obj: dict[str, Any] = {"apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
                           "metadata": {"name": NAME},
                           "spec": {"nodeNames": ["a"], "uncordon": "WhenMaintained",
                                    "maintainedWhen": {"bootIDChanged": True,
                                                       "nodeCondition": {"type": "X"}}},
                           "status": {"nodes": [{"name": "a", "state": "AwaitingMaintenance",
                                                 "recorded": EARLY.as_status()}]}}
    assert crdschema.prune(obj, schema) == []  # the record kept whole, its mark too
    crdschema.default(obj, schema)
    assert obj["spec"]["maintainedWhen"] == {"annotation": True, "bootIDChanged": True,
                                             "nodeCondition": {"type": "X", "status": "True"}}
    assert crdschema.validate(obj, schema) == []
    assert parse_spec(obj).maintained_when.boot_id_changed
    for bad, field in (({"kubeletVersion": "latest"}, "spec.maintainedWhen.kubeletVersion"),
                       ({"nodeCondition": {"status": "True"}},
                        "spec.maintainedWhen.nodeCondition.type")):
        wrong = {**obj, "spec": {**obj["spec"], "maintainedWhen": bad}}
        assert [str(e).split(":")[0] for e in crdschema.validate(wrong, schema)] == [field]
    for good in ("changed", "v1.32.1", "1.33.0-eks-1"):
        fine = {**obj, "spec": {**obj["spec"], "maintainedWhen": {"kubeletVersion": good}}}
        assert crdschema.validate(fine, schema) == [], good
        assert parse_spec(fine).maintained_when.kubelet_version == good


def test_the_marks_are_said_as_the_spec_sets_them() -> None:
    from drainsafe.maintenance.maintained import marks_text
    from drainsafe.maintenance.spec import MaintainedWhen, NodeConditionMark

    assert marks_text(MaintainedWhen(), "m") == f"{MAINTAINED}=m"
    when = MaintainedWhen(annotation=False, node_condition=NodeConditionMark("GPUReady"),
                          boot_id_changed=True, kubelet_version="v1.32.1")
    assert marks_text(when, "m") == ("condition GPUReady=True or a new boot ID or "
                                     "kubelet >= v1.32.1")
