"""Extras state supported ranges; constraints.txt pins one environment inside them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"])


def _requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) for the core dependencies and every extra, minus self-references."""
    project = _project()
    found = [("dependencies", Requirement(text)) for text in project["dependencies"]]
    for extra, texts in project["optional-dependencies"].items():
        found += [(f"extra {extra!r}", Requirement(text)) for text in texts]
    return [(where, req) for where, req in found if canonicalize_name(req.name) != "raylake"]


def _pins(name: str = "constraints.txt") -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"{name}: {line!r} is not name==version"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def test_dependencies_are_ranges_not_pins() -> None:
    pinned = [
        f"{where}: {req}"
        for where, req in _requirements()
        if any(spec.operator in ("==", "===") for spec in req.specifier)
    ]
    assert not pinned, f"exact pins belong in constraints.txt, not pyproject.toml: {pinned}"


def test_constraints_pin_every_dependency_inside_its_range() -> None:
    pins = _pins()
    missing, outside = [], []
    for where, req in _requirements():
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            if req.name == "tensorflow":  # the tf extra: make installs tensorflow-cpu instead
                continue
            missing.append(f"{where}: {req.name}")
        elif not req.specifier.contains(pin, prereleases=True):
            outside.append(f"{where}: {req} but constraints.txt has {pin}")
    hint = "run `make constraints` after installing it (docs/dependencies.md)"
    assert not missing, f"not pinned in constraints.txt: {missing}; {hint}"
    assert not outside, f"constraints.txt pins a version outside the range: {outside}"


def test_constraints_hold_no_raylake_and_no_local_labels() -> None:
    pins = _pins()
    assert "raylake" not in pins
    assert not [f"{n}=={v}" for n, v in pins.items() if v.local], "drop +cpu and the like"


def test_makefile_installs_torch_first_at_the_pinned_version() -> None:
    makefile = (ROOT / "Makefile").read_text()
    first = re.search(r'pip install -c constraints\.txt "torch==([^"]+)"', makefile)
    assert first is not None, "the Makefile must install torch first, pinned, with constraints"
    assert Version(first.group(1)) == _pins()["torch"]
    assert 'pip install -c constraints.txt -e ".[all,tf-cpu,test]"' in makefile


def test_the_paimon_environment_installs_the_pinned_torch_before_pypaimon() -> None:
    """pypaimon's torch dataset (bench/paimon.py) needs torch beside it; any spec other
    than the pinned one downloads CUDA builds."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(PAIMON_VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    installs = re.findall(r"\$\(PAIMON_PY\) -m pip install (.+)", recipe)
    assert installs, "no pip install in the paimon-env recipe"
    assert installs[0].strip() == f'"torch=={_pins()["torch"]}"', installs
    assert "pypaimon==" in installs[1]


def test_tensorflow_has_an_extra_for_each_distribution() -> None:
    extras = _project()["optional-dependencies"]
    assert [Requirement(t).name for t in extras["tf"]] == ["tensorflow"]
    assert [Requirement(t).name for t in extras["tf-cpu"]] == ["tensorflow-cpu"]
    # Both install the `tensorflow` module: `all` must not force either one on a user.
    (everything,) = (Requirement(t) for t in extras["all"])
    assert everything.name == "raylake" and not {"tf", "tf-cpu"} & everything.extras


def test_the_package_and_the_module_agree_on_the_version() -> None:
    import raylake

    assert raylake.__version__ == _project()["version"]


# The extras make test-lowest installs at their lower bounds (docs/dependencies.md); the
# others (ray, spark, tf, torch) are not tested at their lower ends there.
LOWEST_TESTED = ("dependencies", "extra 's3'", "extra 'duckdb'", "extra 'polars'", "extra 'paimon'")


def _lower_bound(req: Requirement) -> Version | None:
    bounds = [Version(spec.version) for spec in req.specifier if spec.operator == ">="]
    return max(bounds) if bounds else None


def test_the_lowest_environment_pins_each_lower_bound() -> None:
    """constraints-lowest.txt holds each tested range's lower end, so a raised bound in
    pyproject.toml is a raised bound in what make test-lowest installs."""
    pins = _pins("constraints-lowest.txt")
    wrong = []
    for where, req in _requirements():
        if where not in LOWEST_TESTED or (req.marker and not req.marker.evaluate()):
            continue
        low = _lower_bound(req)
        pin = pins.get(canonicalize_name(req.name))
        if low is None or pin != low:
            wrong.append(f"{where}: {req} but constraints-lowest.txt has {pin}")
    assert not wrong, f"not at the lower bound: {wrong}"


def test_the_lowest_environment_is_inside_every_range() -> None:
    pins = _pins("constraints-lowest.txt")
    outside = [
        f"{where}: {req} but constraints-lowest.txt has {pins[canonicalize_name(req.name)]}"
        for where, req in _requirements()
        if canonicalize_name(req.name) in pins
        and not req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True)
    ]
    assert not outside, outside


# make test-newest: Python 3.13 with the newest release of every dependency but Spark's and
# TensorFlow's (Makefile).
NEWEST_LEFT_OUT = ("extra 'spark'", "extra 'tf'", "extra 'tf-cpu'")


def test_the_newest_environment_is_inside_every_range() -> None:
    pins = _pins("constraints-newest.txt")
    wrong = []
    for where, req in _requirements():
        if where in NEWEST_LEFT_OUT or (
            req.marker and not req.marker.evaluate({"python_version": "3.13"})
        ):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None or not req.specifier.contains(pin, prereleases=True):
            wrong.append(f"{where}: {req} but constraints-newest.txt has {pin}")
    assert not wrong, f"run make constraints-newest: {wrong}"
    assert pins["pandas"].major == 3
