"""``Samples`` (what ``LakeMapDataset.__getitems__`` returns) behaves as the list of its
samples under every list operation, the first one included: a list subclass whose items
are made late would otherwise show list's own methods an empty list."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")

from raylake.train.samples import Samples

Operation = Callable[[list[Any]], Any]

values = st.integers(-3, 3)
few = st.lists(values, max_size=3)
indices = st.integers(-6, 6)
slices = st.builds(
    slice, st.none() | indices, st.none() | indices, st.sampled_from([None, 1, -1, 2])
)


def _iadd(s: list[Any], vs: list[Any]) -> list[Any]:
    s += vs
    return list(s)


def _imul(s: list[Any], k: int) -> list[Any]:
    s *= k
    return list(s)


def _like(target: list[Any], vs: list[Any]) -> list[Any]:
    """``vs`` as the target is: samples not made yet beside samples, a list beside a list."""
    return Samples(None, len(vs), lambda: list(vs)) if isinstance(target, Samples) else list(vs)


# Each operation, as a strategy of calls on a list: what the call returns.
OPERATIONS: dict[str, st.SearchStrategy[Operation]] = {
    "len": st.just(len),
    "iter": st.just(list),
    "reversed": st.just(lambda s: list(reversed(s))),
    "repr": st.just(repr),
    "copy": st.just(lambda s: s.copy()),
    "sort": st.just(lambda s: s.sort()),
    "reverse": st.just(lambda s: s.reverse()),
    "clear": st.just(lambda s: s.clear()),
    "numpy": st.just(lambda s: np.array(s).tolist()),
    "pickle": st.just(lambda s: pickle.loads(pickle.dumps(s))),
    "copy.copy": st.just(lambda s: list(copy.copy(s))),
    "unpack": st.just(lambda s: [*s]),
    "tuple": st.just(tuple),
    "sum": st.just(sum),
    "pop": st.just(lambda s: s.pop()),
    "getitem": indices.map(lambda i: lambda s: s[i]),
    "getitem slice": slices.map(lambda k: lambda s: s[k]),
    "contains": values.map(lambda v: lambda s: v in s),
    "count": values.map(lambda v: lambda s: s.count(v)),
    "index": values.map(lambda v: lambda s: s.index(v)),
    "remove": values.map(lambda v: lambda s: s.remove(v)),
    "append": values.map(lambda v: lambda s: s.append(v)),
    "extend": few.map(lambda vs: lambda s: s.extend(vs)),
    "eq": few.map(lambda vs: lambda s: (s == vs, s != vs, vs == s, vs != s)),
    "order": few.map(lambda vs: lambda s: (s < vs, s <= vs, s > vs, s >= vs, vs < s)),
    "add": few.map(lambda vs: lambda s: s + vs),
    "radd": few.map(lambda vs: lambda s: vs + s),
    "iadd": few.map(lambda vs: lambda s: _iadd(s, vs)),
    "extend another": few.map(lambda vs: lambda s: _iadd(list(vs), s)),
    "mul": st.integers(0, 2).map(lambda k: lambda s: (s * k, k * s)),
    "imul": st.integers(0, 2).map(lambda k: lambda s: _imul(s, k)),
    "insert": st.tuples(indices, values).map(lambda t: lambda s: s.insert(*t)),
    "setitem": st.tuples(indices, values).map(lambda t: lambda s: s.__setitem__(*t)),
    "delitem": indices.map(lambda i: lambda s: s.__delitem__(i)),
    "delitem slice": slices.map(lambda k: lambda s: s.__delitem__(k)),
    "pop at": indices.map(lambda i: lambda s: s.pop(i)),
    # the other operand samples too: list's C code read it as empty (g(4) + g(5) == [4])
    "add samples": few.map(lambda vs: lambda s: (s + _like(s, vs), _like(s, vs) + s)),
    "eq samples": few.map(lambda vs: lambda s: (s == _like(s, vs), _like(s, vs) != s)),
    "order samples": few.map(lambda vs: lambda s: (s < _like(s, vs), _like(s, vs) <= s)),
    "iadd samples": few.map(lambda vs: lambda s: _iadd(s, _like(s, vs))),
    "extend samples": few.map(lambda vs: lambda s: s.extend(_like(s, vs))),
}


def _outcome(operation: Operation, target: list[Any]) -> Any:
    try:
        got = operation(target)
    except Exception as error:  # the same error type as the list's
        return type(error)
    return list(got) if isinstance(got, list) else got


@pytest.mark.parametrize("first", list(OPERATIONS))
@given(data=st.data())
def test_samples_behave_as_the_list_of_their_samples(first: str, data: st.DataObject) -> None:
    # Each operation first (on samples not made yet), then any others.
    items = data.draw(st.lists(values, min_size=1, max_size=6), label="items")
    operations = [data.draw(OPERATIONS[first], label=first)]
    operations += data.draw(st.lists(st.one_of(*OPERATIONS.values()), max_size=4))
    model = list(items)
    samples = Samples(None, len(items), lambda: list(items))
    for operation in operations:
        assert _outcome(operation, samples) == _outcome(operation, model)
        assert len(samples) == len(model)
    assert list(samples) == model


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.pop(),
        lambda s: s.sort(reverse=True),
        lambda s: s.reverse(),
        lambda s: s.__setitem__(slice(None), s[:1]),
        lambda s: s.__delitem__(0),
        lambda s: s.append(s[0]),
        lambda s: s.__iadd__(s[:1]),
    ],
)
def test_a_changed_list_is_collated_as_it_is_now(change: Operation) -> None:
    """``collate`` hands over the gathered batch only while the list holds its samples
    (was: the batch as gathered, whatever a custom collate had removed or reordered)."""
    import torch

    from raylake.train.samples import collate

    batch = torch.arange(4.0).reshape(4, 1)
    samples = Samples(batch, 4, lambda: list(batch.unbind()))
    assert collate(samples) is batch
    change(samples)
    assert samples.batch is None
    assert torch.equal(collate(samples), torch.stack(list(samples)))
