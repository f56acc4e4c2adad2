"""Batch samplers for map-style datasets that make each batch of indices in one step.

``DataLoader(ds, batch_size=1024, shuffle=True)`` samples through torch's
``RandomSampler`` and ``BatchSampler``, which hand out indices one at a time in
Python: about 0.3 ms a batch of 1024 on the 2-core machine, twice what
``LakeMapDataset`` takes to gather the batch (docs/benchmarks.md, "Batch samplers").
The sampler runs in the main process, so with workers it bounds the whole loader.

These samplers yield the same batches, each sliced from one permutation tensor:

- :class:`RandomBatchSampler` is torchdata's ``BatchSampler(RandomSampler(ds,
  generator=g), n, drop_last)``, batch for batch, epoch after epoch (and, in a loader
  given the same ``g``, ``StatefulDataLoader(ds, batch_size=n, shuffle=True,
  generator=g)``: see the class);
- :class:`DistributedBatchSampler` is ``BatchSampler(DistributedSampler(ds, ...), n,
  drop_last)`` for one rank (``set_epoch`` as there).

Both are resumable under ``StatefulDataLoader``: their iterators have
``state_dict``/``load_state_dict`` (torchdata's ``Stateful``), so a saved loader resumes
at the next batch without replaying the ones before. They work for any map-style
dataset: a batch is a list of ints.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler

from raylake.arguments import check_flag, check_integer, refuse_unknown_keywords
from raylake.errors import InvalidArgumentError, ResumeStateError

# The seeds torch.Generator.manual_seed takes: a signed or an unsigned 64-bit integer.
_SEEDS = range(-(1 << 63), 1 << 64)


def _batch_count(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


class _Batches(Iterator[list[int]]):
    """Batches sliced from ``order`` (a 1-D int64 tensor), ``batch_size`` at a time;
    the subclasses say what recreates ``order`` in their ``state_dict``."""

    def __init__(self, order: torch.Tensor, batch_size: int, drop_last: bool) -> None:
        self._order = order
        self._batch_size = batch_size
        self._count = _batch_count(len(order), batch_size, drop_last)
        self.yielded = 0

    def __iter__(self) -> _Batches:
        return self

    def _resume(self, state: object, keys: tuple[str, ...]) -> dict[str, Any]:
        """``state`` checked to be this sampler's saved position (another sampler's
        state, torchdata's say, would otherwise fail with a bare KeyError)."""
        if not isinstance(state, dict) or not set(keys) <= state.keys():
            raise ResumeStateError(
                f"{type(self).__name__}: not a saved position of this sampler (a dict "
                f"with {', '.join(keys)}): {state!r:.200}"
            )
        batches = state["batches"]
        if not isinstance(batches, int) or not 0 <= batches <= self._count:
            raise ResumeStateError(
                f"{type(self).__name__}: {batches!r} batches taken, of {self._count} an epoch"
            )
        return state

    def __next__(self) -> list[int]:
        if self.yielded >= self._count:
            raise StopIteration
        lo = self.yielded * self._batch_size
        self.yielded += 1
        batch: list[int] = self._order[lo : lo + self._batch_size].tolist()
        return batch


class RandomBatchSampler(Sampler[list[int]]):
    """Shuffled batches of ``range(len(data_source))``: what
    ``BatchSampler(RandomSampler(data_source, generator=generator), batch_size,
    drop_last)`` yields under torchdata's ``StatefulDataLoader``, each batch made in one
    step. Each epoch (each ``iter``) draws ``torch.randperm(n, generator=generator)``;
    without a generator, one is seeded from torch's global generator here, once, as
    torchdata's ``RandomSampler`` does. Use it as ``DataLoader(ds,
    batch_sampler=RandomBatchSampler(ds, 1024))``.

    ``StatefulDataLoader(ds, batch_size=n, shuffle=True, generator=g)`` matches it in
    the first epoch without workers only: after each epoch's permutation the loader
    draws its workers' base seed from ``g`` as well (and with workers starts the epoch's
    sampler again after that). A loader given this sampler's generator
    (``StatefulDataLoader(ds, batch_sampler=sampler, generator=g)``) draws from ``g``
    in the same order, and then the two match epoch after epoch."""

    @refuse_unknown_keywords
    def __init__(
        self,
        data_source: Sized,
        batch_size: int,
        drop_last: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        self.data_source = data_source
        self.batch_size = check_integer("batch_size", batch_size, 1)
        self.drop_last = check_flag("drop_last", drop_last)
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        elif not isinstance(generator, torch.Generator):
            raise InvalidArgumentError("generator", generator, "a torch.Generator or None")
        self.generator = generator

    def __iter__(self) -> Iterator[list[int]]:
        return _RandomBatches(self)

    def __len__(self) -> int:
        return _batch_count(len(self.data_source), self.batch_size, self.drop_last)


class _RandomBatches(_Batches):
    """One epoch of a :class:`RandomBatchSampler`; its state is the generator's state
    before the epoch's permutation and the batches handed out."""

    def __init__(self, sampler: RandomBatchSampler) -> None:
        self._sampler = sampler
        super().__init__(self._draw(), sampler.batch_size, sampler.drop_last)

    def _draw(self) -> torch.Tensor:
        generator = self._sampler.generator
        self._generator_state = generator.get_state()
        return torch.randperm(len(self._sampler.data_source), generator=generator)

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self._generator_state, "batches": self.yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = self._resume(state, ("generator", "batches"))
        self._sampler.generator.set_state(state["generator"])
        self._order = self._draw()
        self.yielded = state["batches"]


class DistributedBatchSampler(Sampler[list[int]]):
    """One rank's batches: what ``BatchSampler(DistributedSampler(dataset,
    num_replicas, rank, shuffle, seed, drop_last), batch_size, batch_drop_last)``
    yields, each batch made in one step. ``drop_last`` is DistributedSampler's (drop
    the tail that does not divide among the ranks, else repeat the first indices to
    fill it); ``batch_drop_last`` is BatchSampler's (drop this rank's last smaller
    batch). Call ``set_epoch(epoch)`` before each epoch, as with DistributedSampler.
    ``num_replicas`` and ``rank`` default to the initialized process group's."""

    @refuse_unknown_keywords
    def __init__(
        self,
        dataset: Sized,
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        batch_drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            if not torch.distributed.is_available() or not torch.distributed.is_initialized():
                raise InvalidArgumentError(
                    "num_replicas" if num_replicas is None else "rank",
                    None,
                    "given, or a torch.distributed process group initialized",
                )
            num_replicas = (
                torch.distributed.get_world_size() if num_replicas is None else num_replicas
            )
            rank = torch.distributed.get_rank() if rank is None else rank
        self.num_replicas = check_integer("num_replicas", num_replicas, 1)
        self.rank = check_integer("rank", rank)
        if self.rank >= self.num_replicas:
            raise InvalidArgumentError("rank", rank, f"in [0, {self.num_replicas - 1}]")
        self.dataset = dataset
        self.batch_size = check_integer("batch_size", batch_size, 1)
        self.shuffle = check_flag("shuffle", shuffle)
        # Any seed torch's generator takes, negative ones too, as DistributedSampler does.
        self.seed = check_integer("seed", seed, None)
        if self.seed not in _SEEDS:
            raise InvalidArgumentError("seed", seed, "an int in [-2**63, 2**64) (torch's seeds)")
        self.drop_last = check_flag("drop_last", drop_last)
        self.batch_drop_last = check_flag("batch_drop_last", batch_drop_last)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Epoch ``epoch``'s order next: any int (a numpy one from ``np.arange`` too), as
        DistributedSampler takes it; the order is drawn with seed ``seed + epoch``."""
        epoch = check_integer("epoch", epoch, None)
        if self.seed + epoch not in _SEEDS:
            raise InvalidArgumentError(
                "epoch", epoch, f"an int that keeps seed + epoch (seed={self.seed}) a torch seed"
            )
        self.epoch = epoch

    @property
    def num_samples(self) -> int:
        """This rank's indices an epoch (DistributedSampler's ``num_samples``)."""
        n, r = len(self.dataset), self.num_replicas
        if self.drop_last and n % r:
            return math.ceil((n - r) / r)
        return math.ceil(n / r)

    def indices(self) -> torch.Tensor:
        """This rank's indices of the epoch, in order: DistributedSampler's."""
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        total = self.num_samples * self.num_replicas
        if total > n:  # the first indices again, as often as it takes
            order = order.repeat(-(-total // n)) if n else order
        return order[:total][self.rank : total : self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        return _DistributedBatches(self)

    def __len__(self) -> int:
        return _batch_count(self.num_samples, self.batch_size, self.batch_drop_last)


class _DistributedBatches(_Batches):
    """One epoch of a :class:`DistributedBatchSampler`; its state is the epoch and the
    batches handed out."""

    def __init__(self, sampler: DistributedBatchSampler) -> None:
        self._sampler = sampler
        self._epoch = sampler.epoch
        super().__init__(sampler.indices(), sampler.batch_size, sampler.batch_drop_last)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "batches": self.yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = self._resume(state, ("epoch", "batches"))
        finished = state["batches"] == self._count
        # StatefulDataLoader loads this state when the loader's iterator is made, after
        # the loop's set_epoch(e + 1): an epoch saved at its end leaves the later epoch
        # set, as DistributedSampler's epoch stays (the loader skips its indices).
        if not finished or state["epoch"] > self._sampler.epoch:
            self._sampler.set_epoch(state["epoch"])
        self._epoch = self._sampler.epoch
        self._order = self._sampler.indices()
        self.yielded = state["batches"]
