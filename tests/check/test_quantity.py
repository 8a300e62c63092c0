"""Resource quantities read as the API server reads them (apimachinery quantity.go), and a
quantity it refuses in a container's requests or limits is an input error (issue 31)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from check_manifests import container, deployment, to_yaml
from hypothesis import given
from hypothesis import strategies as st

from drainsafe.cli import main
from drainsafe.quantity import QuantityError, parse_quantity, resource_quantity_problem


@pytest.mark.parametrize("text, value", [
    ("1", 1), ("0", 0), ("500m", Decimal("0.5")), ("16Gi", 16 * 2**30), ("1.5Ki", 1536),
    ("1e3", 1000), ("1E3", 1000), ("1e-3", Decimal("0.001")), ("2k", 2000), ("3M", 3 * 10**6),
    ("1n", Decimal("1e-9")), ("1u", Decimal("1e-6")), ("1E", 10**18), ("1Ei", 2**60),
    # parseQuantityString takes these too: a missing numerator or denominator is 0, a lone
    # sign or point is 0, and a JSON string's white space is trimmed.
    (".5", Decimal("0.5")), ("5.", 5), ("+1", 1), ("-", 0), (".", 0), (" 2 ", 2),
    ("0010", 10),
])
def test_quantities_the_api_server_takes(text: str, value: Decimal | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", [
    "abc", "", "1.2.3", "1 Gi", "0x10", "1e", "2gi", "1Ki3", "1.5e3.2", "--1", "1e3e3",
    "1KiB", "one", "1k2", "e", "1e99999999999999999999",
])
def test_quantities_the_api_server_refuses(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(st.integers(min_value=0, max_value=10**6),
       st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e2", "E-1"]))
def test_integers_with_any_suffix_parse(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") >= 0


@pytest.mark.parametrize("name, value, problem", [
    ("nvidia.com/gpu", "abc", "invalid quantity 'abc'"),
    ("nvidia.com/gpu", "0.5", "whole number"),
    ("nvidia.com/gpu", 1.5, "whole number"),
    ("memory", "-1Gi", "greater than or equal to 0"),
    ("cpu", True, "expected a quantity"),
    ("cpu", ["1"], "expected a quantity"),
    ("cpu", float("inf"), "invalid quantity"),
])
def test_resource_problems(name: str, value: object, problem: str) -> None:
    found = resource_quantity_problem(name, value)
    assert found is not None and problem in found, found


@pytest.mark.parametrize("name, value", [
    ("nvidia.com/gpu", 1), ("nvidia.com/gpu", "2"), ("cpu", "500m"), ("cpu", 0.5),
    ("memory", "64Gi"), ("kubernetes.io/foo", "0.5"), ("memory", None),
])
def test_resources_the_api_server_takes(name: str, value: object) -> None:
    assert resource_quantity_problem(name, value) is None


def test_invalid_gpu_limit_is_an_input_error_naming_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    bad = deployment("gpu", grace=60, containers=[container(gpus=1)])
    limits = bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"] = "abc"
    (tmp_path / "bad.yaml").write_text(to_yaml(bad))
    (tmp_path / "other.yaml").write_text(to_yaml(deployment("other", replicas=1)))
    code = main(["check", str(tmp_path / "bad.yaml"), str(tmp_path / "other.yaml")])
    out, err = capsys.readouterr()
    assert code == 2
    line = next(n for n, text in enumerate(
        (tmp_path / "bad.yaml").read_text().splitlines(), 1) if "nvidia.com/gpu:" in text)
    assert (f"error: {tmp_path / 'bad.yaml'}:{line}: Deployment default/gpu: spec.template."
            "spec.containers.0.resources.limits.nvidia.com/gpu: invalid quantity 'abc'") in err
    assert "single-replica" in out  # the other file is still checked


def test_requests_that_are_not_a_mapping_are_an_input_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    bad = deployment("web", grace=60, containers=[container()])
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": "1Gi"}
    (tmp_path / "bad.yaml").write_text(to_yaml(bad))
    assert main(["check", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert "resources.requests: expected a mapping of resource names to quantities" in err
