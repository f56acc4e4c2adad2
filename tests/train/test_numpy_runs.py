"""Runs of batches cut from numpy windows (to_tf_dataset's feed) against the model: the
batches ``stream.cut`` makes one by one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from property_depth import examples

from raylake.train.passes import runs
from raylake.train.stream import cut


@settings(max_examples=examples(200), deadline=None)
@given(
    windows=st.lists(st.integers(0, 40), max_size=8),
    batch=st.integers(1, 12),
    tail=st.integers(0, 11),
    count=st.integers(0, 30),
)
def test_runs_split_into_the_batches_cut_makes(
    windows: list[int], batch: int, tail: int, count: int
) -> None:
    blocks, start = [], 0
    for n in windows:
        ids = np.arange(start, start + n)
        blocks.append({"id": ids, "pair": np.stack([ids, -ids], axis=1)})
        start += n
    sizes = [batch] * count + ([tail] if tail else [])
    model = list(cut(iter(blocks), iter(sizes)))
    got = []
    for run, rows in runs(iter(blocks), iter(sizes)):
        k, size = run["id"].shape[:2]
        assert rows == k * size and run["pair"].shape == (k, size, 2)
        got.extend({key: v[i] for key, v in run.items()} for i in range(k))
    assert len(got) == len(model)
    for have, want in zip(got, model):
        assert all(np.array_equal(have[key], want[key]) for key in want)
