"""Shuffled positions name rows of orders numpy draws; numpy may draw others after an
upgrade (NEP 19), so positions carry a fingerprint of its draws and a resume checks it."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from test_torch_iterable import make

import raylake
from raylake.errors import ResumeStateError
from raylake.train.sharding import shuffle_stream


def saved_after(ds: Any, k: int) -> dict[str, Any]:
    it = iter(ds)
    for _ in itertools.islice(it, k):
        pass
    return ds.state_dict()


def test_positions_record_numpys_draws(append_table: raylake.Table) -> None:
    state = saved_after(make(append_table), 2)
    assert state["shuffle_stream"] == shuffle_stream() and state["numpy"] == np.__version__


def test_a_shuffled_position_of_other_draws_is_refused(append_table: raylake.Table) -> None:
    state = saved_after(make(append_table, shuffle=True), 2)
    other = {**state, "shuffle_stream": "0" * 16, "numpy": "0.0"}
    with pytest.raises(ResumeStateError, match=r"numpy 0\.0 draws other permutations"):
        make(append_table, shuffle=True).load_state_dict(other)


@pytest.mark.parametrize(
    ("shuffle", "batches", "stream"),
    [
        (False, 2, "0" * 16),  # unshuffled: no draws to differ
        (True, 0, "0" * 16),  # nothing of the epoch read yet
        (True, 2, None),  # saved before the fingerprint was recorded: not checked
    ],
)
def test_positions_that_do_not_depend_on_the_draws_resume(
    append_table: raylake.Table, shuffle: bool, batches: int, stream: str | None
) -> None:
    state = {**saved_after(make(append_table, shuffle=shuffle), batches), "shuffle_stream": stream}
    if stream is None:
        del state["shuffle_stream"], state["numpy"]
    ds = make(append_table, shuffle=shuffle)
    ds.load_state_dict(state)
    assert sum(1 for _ in ds) > 0
