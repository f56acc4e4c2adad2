"""A batch gathered once, handed to ``DataLoader`` as the list of samples its
``__getitems__`` contract asks for (docs/training.md, "LakeMapDataset").

``DataLoader(ds, batch_size=n)`` calls ``ds.__getitems__(indices)`` and passes the
list to its collate, which stacks the samples again: per sample, a tensor is made
(``unbind``) and copied back (``torch.stack``), about 2 ms a batch of 1024 where the
gather itself takes microseconds. :class:`Samples` holds the gathered batch and
builds the per-sample list only when something reads it as a list; :func:`collate`
(``collate_fn=LakeMapDataset.collate``) hands the batch over as it is, so nothing is
built per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import default_collate


class Samples(list):  # type: ignore[type-arg]
    """The samples of a gathered batch, made on first use as a list.

    A ``list`` (what ``__getitems__`` returns by contract), filled from the batch the
    first time it is used through Python: ``len`` aside, every list operation, reading
    or changing, fills it first (the default collate reads ``batch[0]`` before anything
    else, so it sees a full list). Code in C that reads a list's items without going
    through Python first sees it empty: ``torch.stack(samples)`` as a collate's first
    use raises "stack expects a non-empty TensorList"; index or iterate the list first,
    or use :func:`collate`. ``batch`` is the gathered batch in the structure ``ds[list]``
    returns, or None when a per-sample transform makes the collated batch differ from it
    or the list was changed (``pop``, ``sort``, ``samples[:] = ...``).
    """

    def __init__(self, batch: Any, n: int, make: Callable[[], list[Any]]) -> None:
        super().__init__()
        self.batch = batch
        self._n = n
        self._make: Callable[[], list[Any]] | None = make

    def _filled(self) -> None:
        if self._make is not None:
            make, self._make = self._make, None
            super().extend(make())

    def __len__(self) -> int:
        return self._n if self._make is not None else super().__len__()

    __hash__ = None  # type: ignore[assignment]

    def __radd__(self, other: Any) -> Any:
        # ``[...] + samples``: list's own concatenation would read the items in C.
        if not isinstance(other, list):
            return NotImplemented
        self._filled()
        return list.__add__(other, self)

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        self._filled()
        return list, (list(super().__iter__()),)


def _filling(name: str, changes: bool) -> Callable[..., Any]:
    """``list``'s method ``name``, called on the samples made first (its operands' too:
    ``a + b`` and ``a == b`` read the other list's items in C). A method that
    ``changes`` the list drops ``batch``, which no longer holds these samples."""
    method = getattr(list, name)

    def call(self: Samples, *args: Any, **kwargs: Any) -> Any:
        self._filled()
        for arg in args:
            if isinstance(arg, Samples):
                arg._filled()
        if changes:
            self.batch = None
        return method(self, *args, **kwargs)

    call.__name__, call.__qualname__ = name, f"Samples.{name}"
    call.__doc__ = method.__doc__
    return call


# Every list method that reads or changes the items (``len`` is known without them): on
# a list not made yet, list's own methods would see it empty.
_READING = (
    "__getitem__", "__iter__", "__reversed__", "__contains__", "__repr__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__add__", "__mul__", "__rmul__", "copy", "count", "index",
)  # fmt: skip
_CHANGING = (
    "__iadd__", "__imul__", "__setitem__", "__delitem__",
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
)  # fmt: skip
for _name in _READING:
    setattr(Samples, _name, _filling(_name, changes=False))
for _name in _CHANGING:
    setattr(Samples, _name, _filling(_name, changes=True))


def collate(samples: Any) -> Any:
    """``collate_fn`` for ``LakeMapDataset``: a gathered batch as it is (no sample is
    made, nothing is stacked again); anything else through torch's default collate."""
    if isinstance(samples, Samples) and samples.batch is not None:
        return _as_collated(samples.batch)
    return default_collate(samples)


def _as_collated(batch: Any) -> Any:
    """The default collate's structure: it returns the tuples of samples as lists."""
    if isinstance(batch, tuple):
        return [_as_collated(part) for part in batch]
    return batch
