"""Warnings from raylake's own calls are errors in the tests (issue 15).

pyproject.toml's ``filterwarnings`` starts with ``error`` and ignores only warnings that
other libraries attribute to their own modules: a deprecated call that raylake makes is
attributed to raylake's module (Ray, torch ...) or to pyarrow's (pyarrow names itself),
and must fail the test that makes it (docs/decisions.md, "Warnings in the tests").
"""

from __future__ import annotations

import warnings

import pytest


def _warn(category: type[Warning], module: str) -> None:
    """A warning as Python attributes it: to ``module``, the caller of a deprecated API."""
    warnings.warn_explicit("deprecated", category, f"{module.replace('.', '/')}.py", 1, module)


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning, UserWarning])
@pytest.mark.parametrize("module", ["raylake.table.pk.engines", "raylake.datasource.api"])
def test_a_warning_raised_in_raylake_is_an_error(category: type[Warning], module: str) -> None:
    with pytest.raises(category):
        _warn(category, module)


def test_pyarrow_warnings_are_errors_too() -> None:
    """pyarrow attributes the deprecation of an option its caller passed to itself
    (``null_placement`` of ``SortOptions``): ignoring pyarrow would hide raylake's calls."""
    with pytest.raises(FutureWarning):
        _warn(FutureWarning, "pyarrow.compute")


def test_other_libraries_warnings_about_their_own_code_are_ignored() -> None:
    with warnings.catch_warnings(record=True) as caught:  # the configured filters
        _warn(DeprecationWarning, "ray.data.read_api")
        _warn(FutureWarning, "torch.utils.data")
    assert caught == []
