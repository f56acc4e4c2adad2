"""Ray Train: the examples' 2-worker TorchTrainer and TensorflowTrainer, on the session cluster.

Each worker records the ids it read: the shards must be disjoint and cover the table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROWS = 2000


def example(name: str) -> Any:
    """Import an example script; its functions travel to Ray workers by value."""
    ray = pytest.importorskip("ray")
    sys.path.insert(0, str(EXAMPLES))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))
    ray.cloudpickle.register_pickle_by_value(module)
    return module


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("ray_train") / "t")
    example("train_torch_ray").make_table(path, ROWS)
    return path


@pytest.mark.parametrize("source", ["read_lake", "lake"])
def test_torch_trainer_two_workers(ray_cluster: Any, uri: str, tmp_path: Path, source: str) -> None:
    ex = example("train_torch_ray")
    results = ex.run(uri, source, str(tmp_path), batch_size=200)
    assert [r["rank"] for r in results] == [0, 1] and all(r["world"] == 2 for r in results)
    ex.check_shards(results, ROWS, whole_epoch=True)
    assert len(results[0]["losses"]) == len(results[1]["losses"]) == 5  # equal steps
    assert results[0]["losses"][-1] < results[0]["losses"][0]


def test_tensorflow_trainer_two_workers(ray_cluster: Any, uri: str, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    example("train_torch_ray")
    ex = example("train_tf_ray")
    results = ex.run(uri, "lake", str(tmp_path), batch_size=200)
    example("train_torch_ray").check_shards(results, ROWS, whole_epoch=True)
    assert len(results[0]["losses"]) == len(results[1]["losses"]) == 5


def test_zero_copy_ray_batches(ray_cluster: Any, append_table: Any) -> None:
    import torch

    from raylake import read_lake
    from raylake.train.ray import iter_torch_batches

    ds = read_lake(append_table.uri, columns=["id", "x", "emb", "label"])
    batches = list(
        iter_torch_batches(
            ds,
            feature_columns=["id", "x", "emb"],
            label_column="label",
            batch_size=64,
            dtype=torch.float64,
        )
    )
    assert {len(y) for _, y in batches[:-1]} == {64} and 0 < len(batches[-1][1]) <= 64
    ids = sorted(int(i) for x, _ in batches for i in x[:, 0])
    assert ids == list(range(700))
    assert batches[0][0].shape[1] == 4 and batches[0][0].dtype == torch.float64
    dropped_it = iter_torch_batches(ds, columns=["id"], batch_size=64, drop_last=True)
    dropped = list(dropped_it)
    assert len(dropped) == 700 // 64 and all(len(b["id"]) == 64 for b in dropped)
    stats = dropped_it.stats()  # the trainer's view: batches, rows, bytes, windows (blocks)
    assert stats.batches == len(dropped) and stats.rows == 64 * len(dropped)
    assert stats.windows >= 1 and stats.device_copies == 0 and stats.bytes == 8 * stats.rows


def tiny_trainer(storage: Path) -> Any:
    """A one-worker trainer that trains nothing: a Ray Train run at its cheapest. The
    base class of TorchTrainer and TensorflowTrainer, whose fit() makes the controller;
    without a framework backend its worker neither imports torch nor makes a process
    group."""
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    return DataParallelTrainer(
        lambda: None,
        scaling_config=ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0.5}),
        run_config=ray.train.RunConfig(storage_path=str(storage), name="tiny"),
    )


def train_controllers() -> list[str]:
    from ray._private import state

    alive = state.actors(actor_state_name="ALIVE").values()
    return [a["ActorClassName"] for a in alive if a["ActorClassName"] == "TrainController"]


def test_nothing_of_a_run_outlives_fit(ray_cluster: Any, tmp_path: Path) -> None:
    """Ray Train's fit() leaves its controller alive, held by the SIGINT handler it
    installs; it went only when PySpark replaced that handler, and its teardown in the
    middle of Spark's start-up stalled the driver (the README's StreamingJob after it
    then waited without end). raylake.train.fit stops it; raylake.spark.session releases
    the controller a plain fit() left (release_train_controller)."""
    import signal

    import raylake.train
    from raylake.train.trainer import release_train_controller

    before = signal.getsignal(signal.SIGINT)
    raylake.train.fit(tiny_trainer(tmp_path))
    assert signal.getsignal(signal.SIGINT) is before and train_controllers() == []

    tiny_trainer(tmp_path).fit()  # Ray's own: if this assert fails, Ray fixed its leak
    assert signal.getsignal(signal.SIGINT) is not before and train_controllers() != []
    assert release_train_controller(restore=before)
    assert signal.getsignal(signal.SIGINT) is before and train_controllers() == []
    assert not release_train_controller()  # nothing of Ray Train's left to release
