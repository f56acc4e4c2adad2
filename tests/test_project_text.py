"""What a reader of the project sees: the docs cite no internal issue numbers, the README
says which Pythons and pandas versions are supported (as pyproject.toml does), and the
license is the SPDX string setuptools asks for (the table form is deprecated)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_the_docs_cite_no_issue_numbers() -> None:
    cited = [
        f"{page.name}:{n}: {line.strip()}"
        for page in PAGES
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"\bissues?[ -]?#?\d", line, re.IGNORECASE)
    ]
    assert not cited, cited


def test_the_readme_states_the_supported_pythons_and_pandas() -> None:
    project = _pyproject()["project"]
    readme = (ROOT / "README.md").read_text()
    claimed = re.search(r"\*\*Supported:\*\* Python ([\d., and]+), and pandas ([^(]+)\(", readme)
    assert claimed, "README.md must say which Pythons and pandas versions are supported"
    pythons = re.findall(r"3\.\d+", claimed.group(1))
    requires = SpecifierSet(project["requires-python"])
    assert pythons[0] == "3.10" and all(requires.contains(f"{v}.0") for v in pythons)
    (pandas,) = (Requirement(d) for d in project["dependencies"] if d.startswith("pandas"))
    assert pandas.specifier.contains("2.0.0") and pandas.specifier.contains("3.1.1")
    assert "2.x and 3.x" in claimed.group(2)


def test_the_license_is_an_spdx_string() -> None:
    data = _pyproject()
    assert data["project"]["license"] == "Apache-2.0"
    (setuptools,) = (Requirement(r) for r in data["build-system"]["requires"] if "setuptools" in r)
    assert setuptools.specifier.contains("77.0") and not setuptools.specifier.contains("76.0")


def test_test_modules_have_unique_names() -> None:
    # The test folders are not packages: pytest imports each test module by its file
    # name, so two of one name in different folders stop the whole run at collection.
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
