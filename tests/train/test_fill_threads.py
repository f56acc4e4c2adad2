"""A window's copies shared by threads (a host of 8 cores or more): the same batches and
positions as on the converting thread alone, and no thread left after a pass.

This machine has too few cores for the threaded path to be taken by default, so the
tests ask for it (``FILL_THREADS``) and let every copy be split, however small."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from read_threads import raylake_threads
from test_torch_iterable import ids_of, make

import raylake
from raylake.train import device as device_module
from raylake.train import fill as fill_module


def epoch_and_positions(ds: Any, number: int) -> list[tuple[list[int], list[float]]]:
    ds.set_epoch(number)
    return [(ids_of(b), b[0][:, 1].tolist()) for b in ds]


@pytest.fixture
def threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fill_module, "FILL_THREADS", 3)
    monkeypatch.setattr(fill_module, "_MIN_PART_BYTES", 1)


@pytest.mark.parametrize("device", [None, "simulated"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_threaded_copies_give_the_same_batches(
    table: raylake.Table,
    shuffle: bool,
    device: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if device == "simulated":
        monkeypatch.setattr(device_module, "simulated", device_module.SimulatedDevice)
    kwargs: dict[str, Any] = {"shuffle": shuffle, "device": "cuda" if device else None}
    alone = [epoch_and_positions(make(table, **kwargs), n) for n in range(2)]
    monkeypatch.setattr(fill_module, "FILL_THREADS", 3)
    monkeypatch.setattr(fill_module, "_MIN_PART_BYTES", 1)
    ds = make(table, **kwargs)
    assert [epoch_and_positions(ds, n) for n in range(2)] == alone
    assert not raylake_threads()


@pytest.mark.usefixtures("threaded")
def test_a_pass_stopped_early_joins_its_copiers(append_table: raylake.Table) -> None:
    ds = make(append_table, shuffle=True)
    it = iter(ds)
    list(itertools.islice(it, 3))
    assert any(name.startswith("raylake-convert-fill") for name in raylake_threads())
    it.close()  # type: ignore[attr-defined]
    assert not raylake_threads()


@pytest.mark.usefixtures("threaded")
@pytest.mark.parametrize(
    "kwargs", [{"loader_threads": 1}, {"read_ahead": 0, "prefetch": 0}], ids=["cap", "no-ahead"]
)
def test_no_copiers_under_a_cap_or_without_read_ahead(
    append_table: raylake.Table, kwargs: dict[str, Any]
) -> None:
    it = iter(make(append_table, shuffle=True, **kwargs))
    next(it)
    assert not any(name.startswith("raylake-convert-fill") for name in raylake_threads())
    it.close()  # type: ignore[attr-defined]
