"""Training loaders over raylake tables (docs/training.md).

- ``raylake.train.torch``: ``LakeIterableDataset`` and ``LakeMapDataset``, and
  ``LakeStreamDataset`` for continual training on new commits, and
  ``RandomBatchSampler`` and ``DistributedBatchSampler`` for map-style datasets (needs
  ``pip install 'raylake[torch]'``);
- ``raylake.train.tf``: ``to_tf_dataset`` (needs ``pip install 'raylake[tf]'``);
- ``raylake.train.ray``: ``iter_torch_batches`` over a Ray Data ``Dataset`` or
  ``DataIterator`` (Ray Train workers);
- ``fit(trainer)``: a Ray Train trainer's ``fit()``, with nothing of the run left
  alive after it (``raylake.train.trainer``);
- ``consumed_rows(state)``: the rows a saved loader state has consumed;
- ``FeedStats``: what a loader's ``stats()`` returns (how long the trainer waited).

These names are the public surface: import them from ``raylake.train``; the modules
behind them may change between releases.

The framework modules import their framework when first used, so ``import
raylake.train`` needs neither; a missing one raises MissingDependencyError naming
the extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DistributedBatchSampler": "raylake.train.torch",
    "FeedStats": "raylake.train.stats",
    "LakeIterableDataset": "raylake.train.torch",
    "LakeMapDataset": "raylake.train.torch",
    "LakeStreamDataset": "raylake.train.torch",
    "RandomBatchSampler": "raylake.train.torch",
    "consumed_rows": "raylake.train.positions",
    "fit": "raylake.train.trainer",
    "iter_torch_batches": "raylake.train.ray",
    "to_tf_dataset": "raylake.train.tf",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raylake.train' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
