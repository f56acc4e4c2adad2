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

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import default_collate


class Samples(list):  # type: ignore[type-arg]
    """The samples of a gathered batch, made on first use as a list.

    A ``list`` (what ``__getitems__`` returns by contract), filled from the batch the
    first time it is read through Python (``len``, indexing, iteration, comparison):
    the default collate reads ``batch[0]`` before anything else, so it sees a full
    list. ``batch`` is the gathered batch in the structure ``ds[list]`` returns, or
    None when a per-sample transform makes the collated batch differ from it.
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
        return self._n

    def __getitem__(self, index: Any) -> Any:
        self._filled()
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        self._filled()
        return super().__iter__()

    def __reversed__(self) -> Iterator[Any]:
        self._filled()
        return super().__reversed__()

    def __contains__(self, value: object) -> bool:
        self._filled()
        return super().__contains__(value)

    def __eq__(self, other: object) -> bool:
        self._filled()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._filled()
        return super().__repr__()

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        self._filled()
        return list, (list(super().__iter__()),)


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
