"""maintainedWhen.timeoutSeconds: read and refused by parse_spec (as the CRD refuses it),
set by `maintenance create --when-timeout`, and the deadline maintenance.maintained.wait_bound
computes from a status row."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.cli import main
from drainsafe.kube.objects import parse_time, rfc3339
from drainsafe.lab.apiserver import crdschema
from drainsafe.maintenance.cli import CreateFlags, FlagError, done_refusal, manifest_from_flags
from drainsafe.maintenance.maintained import MAINTAINED, marks_text, wait_bound
from drainsafe.maintenance.spec import MaintainedWhen, SpecError, parse_spec
from drainsafe.shell import EXIT_OK, EXIT_USAGE

NAME = "upgrade"
FIELD = "maintainedWhen.timeoutSeconds"
T0 = 1_800_000_000.0  # a whole second


def _obj(when: Any, uncordon: str = "WhenMaintained") -> dict[str, Any]:
    return {"apiVersion": "drainsafe.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": NAME},
            "spec": {"nodeNames": ["a"], "uncordon": uncordon, "maintainedWhen": when}}


def _crd_errors(obj: dict[str, Any]) -> list[str]:
    """What the API server's structural schema says of the object (the lab's, as
    kube-apiserver's): its field paths."""
    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2]
                          / "deploy/controller/nodemaintenance-crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert crdschema.prune(obj, schema) == []  # the field is in the schema, not dropped
    crdschema.default(obj, schema)
    return [str(e).split(":")[0] for e in crdschema.validate(obj, schema)]


@pytest.mark.parametrize("seconds", [1, 600, 86_400])
def test_a_timeout_is_read_and_the_crd_takes_it(seconds: int) -> None:
    obj = _obj({"timeoutSeconds": seconds})
    assert _crd_errors(obj) == []
    # after the CRD's defaulting (annotation: true added) as before it
    assert parse_spec(obj).maintained_when == MaintainedWhen(timeout_seconds=seconds)
    assert parse_spec(_obj({"timeoutSeconds": seconds})).maintained_when.timeout_seconds \
        == seconds
    assert parse_spec(_obj(None)).maintained_when.timeout_seconds is None


@pytest.mark.parametrize("bad", [0, -5, "60", 1.5, True])
def test_a_bad_timeout_is_refused_by_both_the_crd_and_the_reconciler(bad: Any) -> None:
    assert _crd_errors(_obj({"timeoutSeconds": bad})) == [f"spec.{FIELD}"]
    with pytest.raises(SpecError) as err:
        parse_spec(_obj({"timeoutSeconds": bad}))
    assert str(err.value).startswith(f"{FIELD}: {bad!r} is not a whole number"), err.value


@pytest.mark.parametrize("uncordon", ["Immediately", "Never"])
def test_a_timeout_without_when_maintained_is_refused_naming_it(uncordon: str) -> None:
    """Only the reconciler refuses this one: the CRD has no rule across fields (the lab
    checks no x-kubernetes-validations), as for maintainedWhen itself; the operation
    fails InvalidSpec with this message."""
    for when in ({"timeoutSeconds": 60}, {"annotation": True, "timeoutSeconds": 60}):
        obj = _obj(when, uncordon)
        with pytest.raises(SpecError) as err:
            parse_spec(obj)
        assert str(err.value) == (f"{FIELD}: only with uncordon: WhenMaintained "
                                  f"(it is {uncordon})"), err.value
        assert _crd_errors(obj) == []
    # beside a mark, the whole maintainedWhen is at fault
    with pytest.raises(SpecError, match=r"^maintainedWhen: only with uncordon"):
        parse_spec(_obj({"bootIDChanged": True, "timeoutSeconds": 60}, uncordon))


def test_a_timeout_is_not_a_mark() -> None:
    with pytest.raises(SpecError, match="maintainedWhen: nothing would mark"):
        parse_spec(_obj({"annotation": False, "timeoutSeconds": 60}))


# -- the deadline ---------------------------------------------------------------------

def test_no_timeout_waits_as_long_as_it_takes() -> None:
    bound = wait_bound(rfc3339(T0), T0, MaintainedWhen())
    assert bound.deadline is None and bound.left(T0 + 10**9) is None
    assert not bound.expired(T0 + 10**9)


def test_the_deadline_counts_from_the_rows_finished_time_whatever_the_leader() -> None:
    when = MaintainedWhen(timeout_seconds=60)
    finished = rfc3339(T0 + 0.7)  # the API server keeps whole seconds: T0
    # two leaders, one at the drain and one much later, compute the same deadline
    first, later = wait_bound(finished, T0 + 1, when), wait_bound(finished, T0 + 500, when)
    assert first == later
    # counted from the end of the recorded second: never before 60 s of real waiting
    assert first.deadline == T0 + 1 + 60
    assert not first.expired(T0 + 0.7 + 60) and first.left(T0 + 31) == 30
    assert first.expired(T0 + 61) and first.left(T0 + 100) == 0
    # a time with its fraction kept is exact
    assert wait_bound("2027-01-15T08:00:00.500000Z", 0, when).deadline == \
        parse_time("2027-01-15T08:00:00.500000Z") + 60  # type: ignore[operator]


@pytest.mark.parametrize("finished", [None, "", "yesterday"])
def test_a_row_without_a_finished_time_counts_from_the_fallback(finished: str | None) -> None:
    bound = wait_bound(finished, T0, MaintainedWhen(timeout_seconds=5))
    assert (bound.since, bound.deadline) == (T0, T0 + 5)


@given(st.floats(min_value=T0, max_value=T0 + 10**7), st.integers(1, 10**6),
       st.floats(min_value=0, max_value=1, exclude_min=True))
def test_never_before_the_whole_timeout_and_at_most_a_second_after(
        drained: float, timeout: int, short: float) -> None:
    """Whatever the exact moment the drain ended, recorded in whole seconds: not expired
    any time short of the whole timeout after it, always expired a second later."""
    bound = wait_bound(rfc3339(drained), 0, MaintainedWhen(timeout_seconds=timeout))
    assert not bound.expired(drained + timeout - short)
    assert bound.expired(drained + timeout + 1)


def test_the_message_says_what_the_node_is_left_as_and_the_marks_say_the_bound() -> None:
    bound = wait_bound(rfc3339(T0), 0, MaintainedWhen(timeout_seconds=600))
    assert bound.message() == ("not marked maintained within maintainedWhen.timeoutSeconds "
                               "(600s) of its drain; left cordoned and recorded")
    assert marks_text(MaintainedWhen(timeout_seconds=600), NAME) == (
        f"{MAINTAINED}={NAME}; Failed if unmarked 600s after its drain")


# -- the command line ------------------------------------------------------------------

def test_when_timeout_writes_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    obj = manifest_from_flags(CreateFlags(name=NAME, nodes=("a",), uncordon="WhenMaintained",
                                          when_timeout=900))
    assert obj["spec"]["maintainedWhen"] == {"timeoutSeconds": 900}
    assert parse_spec(obj).maintained_when == MaintainedWhen(timeout_seconds=900)
    assert main(["maintenance", "create", NAME, "--node", "a", "--uncordon", "WhenMaintained",
                 "--when-timeout", "900", "--dry-run", "--kubeconfig", "/nonexistent"]) \
        == EXIT_OK
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["spec"]["maintainedWhen"] == {"timeoutSeconds": 900}


@pytest.mark.parametrize(("args", "says"), [
    (["--uncordon", "WhenMaintained", "--when-timeout", "0"], "--when-timeout: " + FIELD),
    (["--when-timeout", "60"], "--when-timeout: " + FIELD + ": only with uncordon"),
])
def test_a_bad_when_timeout_exits_2_naming_the_flag(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintenance", "create", NAME, "--node", "a", *args,
                 "--kubeconfig", "/nonexistent"]) == EXIT_USAGE
    assert says in capsys.readouterr().err


def test_a_when_timeout_not_a_number_is_argparses_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["maintenance", "create", NAME, "--node", "a", "--uncordon", "WhenMaintained",
              "--when-timeout", "1h", "--kubeconfig", "/nonexistent"])
    assert exited.value.code == EXIT_USAGE
    assert "--when-timeout: invalid int value: '1h'" in capsys.readouterr().err


def test_when_timeout_error_from_flags_names_the_flag() -> None:
    with pytest.raises(FlagError, match=r"^--when-timeout: "):
        manifest_from_flags(CreateFlags(name=NAME, nodes=("a",), when_timeout=60))


def test_done_on_a_timed_out_node_says_how_to_give_it_back() -> None:
    obj = {"metadata": {"name": NAME}, "spec": {"uncordon": "WhenMaintained"},
           "status": {"nodes": [{"name": "a", "state": "Failed",
                                 "reason": "MaintenanceTimedOut"}]}}
    why = done_refusal(obj, "a")
    assert why is not None and "timed out" in why and "drainsafe uncordon a" in why
