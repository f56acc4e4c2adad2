"""The torch datasets' DataLoader workers read as their rank when started by spawn.

A worker started by ``spawn`` or ``forkserver`` (the ranks of
``torch.multiprocessing.spawn``, ``multiprocessing_context="spawn"``) has no process
group: it gets a pickled copy of the dataset and must not fall back to rank 0 of 1.
"""

from __future__ import annotations

import os
import pickle
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from conftest import expected_ids
from test_torch_iterable import ids_of
from torch.utils.data import DataLoader

import raylake
from raylake.train import LakeIterableDataset, LakeStreamDataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def as_rank_1_of_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)


@pytest.mark.parametrize("kind", ["iterable", "stream"])
def test_a_copy_made_under_a_process_group_keeps_its_rank(
    append_table: raylake.Table, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    if kind == "iterable":
        ds: Any = LakeIterableDataset(append_table, feature_columns=["id"])
    else:
        ds = LakeStreamDataset(append_table, feature_columns=["id"], until_snapshot=1)
    with monkeypatch.context() as patched:
        as_rank_1_of_2(patched)
        copy = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets
    # In the worker there is no process group.
    assert not dist.is_initialized()
    if kind == "iterable":
        assert copy.rank_and_world_size() == (1, 2)
        assert ds.rank_and_world_size() == (0, 1)  # the original still asks when read
    else:
        assert copy._consumer() == (1, 2)
    # Made without a process group (a driver's copy for Ray Train workers), a copy
    # finds its rank where it is read.
    unranked = pickle.loads(pickle.dumps(ds))
    with monkeypatch.context() as patched:
        as_rank_1_of_2(patched)
        if kind == "iterable":
            assert unranked.rank_and_world_size() == (1, 2)
        else:
            assert unranked._consumer() == (1, 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_as_rank(rank: int, world: int, port: int, uri: str, out: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ds = LakeIterableDataset(uri, feature_columns=["id", "x"], batch_size=32)
        loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
        torch.save([ids_of((b, None)) for b in loader], f"{out}/{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two ranks and their spawned workers import torch and raylake anew
def test_ranks_of_torch_multiprocessing_spawn_read_disjoint_shares(
    append_table: raylake.Table, tmp_path: Path
) -> None:
    import torch.multiprocessing as mp

    mp.spawn(read_as_rank, args=(2, free_port(), append_table.uri, str(tmp_path)), nprocs=2)
    by_rank = [torch.load(tmp_path / f"{rank}.pt") for rank in range(2)]
    assert len(by_rank[0]) == len(by_rank[1])
    seen = Counter(i for batches in by_rank for b in batches for i in b)
    assert sorted(seen) == expected_ids(append_table)
    assert sum(seen.values()) - len(seen) <= 1  # one padding row at most
