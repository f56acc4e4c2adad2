"""PyTorch datasets over raylake tables (docs/training.md).

- :class:`LakeIterableDataset` (raylake/train/torch_iterable.py): batches for
  ``DataLoader(ds, batch_size=None, num_workers=k)`` under DDP, exactly once per
  epoch over all ranks and workers, resumable under another world size or worker
  count.
- :class:`LakeMapDataset` (raylake/train/torch_map.py): ``len`` and indexing by
  global row, for any sampler.
- :class:`LakeStreamDataset` (raylake/train/torch_stream.py): continual training on
  new commits.
- :class:`RandomBatchSampler` and :class:`DistributedBatchSampler`
  (raylake/train/batch_samplers.py): torch's shuffled and distributed batches of
  indices for a map-style dataset, each batch made in one step.

Batches are ``(features, label)`` (features stacked into one 2-D tensor), or a dict
of tensors (``columns=``), or ``(dict, label)`` (raylake/train/tensors.py). Fixed-width
columns without nulls reach torch without a copy. What the datasets set up alike
(the table, the layout, the converter) is raylake/train/setup.py.
"""

from __future__ import annotations

from raylake.errors import MissingDependencyError

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without torch only
    raise MissingDependencyError("torch", "torch") from exc

from raylake.train.batch_samplers import DistributedBatchSampler, RandomBatchSampler
from raylake.train.setup import DEFAULT_SHUFFLE_WINDOW
from raylake.train.tensors import TensorBatches, numpy_dtype_for, to_tensor, torch_spec
from raylake.train.torch_iterable import LakeIterableDataset
from raylake.train.torch_map import LakeMapDataset
from raylake.train.torch_stream import LakeStreamDataset

__all__ = [
    "DEFAULT_SHUFFLE_WINDOW",
    "DistributedBatchSampler",
    "LakeIterableDataset",
    "LakeMapDataset",
    "LakeStreamDataset",
    "RandomBatchSampler",
    "TensorBatches",
    "numpy_dtype_for",
    "to_tensor",
    "torch_spec",
]
