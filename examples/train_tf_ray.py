"""Ray Train + raylake: a TensorflowTrainer with 2 workers reading one raylake table two ways.

1. ``datasets={"train": read_lake(...)}`` and, in each worker,
   ``ray.train.get_dataset_shard("train").to_tf(...)``;
2. ``raylake.train.to_tf_dataset`` through
   ``strategy.distribute_datasets_from_function``: each worker's ``InputContext``
   makes it one input pipeline of two, reading its exact share.

Both train a linear model under ``MultiWorkerMirroredStrategy`` (TF_CONFIG is set
by Ray Train) for one epoch and record the ids each worker read; the script checks
that the shards are disjoint and cover the table.

    python examples/train_tf_ray.py [--warehouse DIR] [--rows 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from train_torch_ray import FEATURES, check_shards, make_table

import raylake
import raylake.train

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: linear regression under MultiWorkerMirroredStrategy.

    A custom step (``strategy.run`` with an all-reduce of the gradients) rather than
    Keras ``fit``, which in Keras 3 does not take multi-worker distributed datasets.
    Every step all-reduces, so the workers must take the same number of steps: both
    loaders guarantee it.
    """
    import ray.train
    import tensorflow as tf

    from raylake.train import to_tf_dataset

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    columns = ["id", *FEATURES]
    batch_size = config["batch_size"]

    def read_lake_shard(_: tf.distribute.InputContext) -> tf.data.Dataset:
        shard = ray.train.get_dataset_shard("train")
        data = shard.to_tf(feature_columns=columns, label_columns="label", batch_size=batch_size)
        return data.map(lambda x, y: (tf.stack([tf.cast(x[c], tf.float32) for c in columns], 1), y))

    def lake_shard(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return to_tf_dataset(
            config["uri"],
            columns,
            "label",
            batch_size=input_context.get_per_replica_batch_size(batch_size * world),
            dtype=tf.float32,
            input_context=input_context,  # pipeline input_pipeline_id of num_input_pipelines
        )

    make = read_lake_shard if config["source"] == "read_lake" else lake_shard
    data = strategy.distribute_datasets_from_function(make)
    with strategy.scope():
        weights = tf.Variable(tf.zeros((len(FEATURES), 1)))
        bias = tf.Variable(0.0)

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            pred = tf.matmul(x[:, 1:], weights)[:, 0] + bias
            loss = tf.reduce_mean(tf.square(pred - tf.cast(y, tf.float32)))
        grads = tape.gradient(loss, [weights, bias])
        grads = tf.distribute.get_replica_context().all_reduce("MEAN", grads)
        for var, grad in zip([weights, bias], grads):
            var.assign_sub(0.05 * grad)
        return loss, x[:, 0]

    # Traced as plain Python (its one loop is over a list): autograph would leave a
    # converted copy of each function in /tmp in every worker process, never deleted.
    @tf.function(autograph=False)
    def step(x: Any, y: Any) -> tuple[tf.Tensor, Any]:
        loss, ids = strategy.run(replica_step, args=(x, y))
        return strategy.reduce("MEAN", loss, axis=None), strategy.experimental_local_results(ids)

    ids: list[int] = []
    losses: list[float] = []
    for x, y in data:
        loss, local_ids = step(x, y)
        losses.append(float(loss))
        ids += [int(i) for part in local_ids for i in part.numpy()]
    out = Path(config["out_dir"]) / f"{config['source']}-rank{rank}.json"
    out.write_text(json.dumps({"rank": rank, "world": world, "ids": ids, "losses": losses}))
    ray.train.report({"loss": losses[-1] if losses else float("nan"), "steps": len(losses)})


def run(
    uri: str,
    source: str,
    out_dir: str,
    *,
    batch_size: int = 256,
    use_gpu: bool = False,
    cpus_per_worker: float = 0.5,
) -> list[dict[str, Any]]:
    """Train with 2 workers on ``source`` ("read_lake" or "lake") and return what each saw."""
    import ray.train
    from ray.train.tensorflow import TensorflowTrainer

    datasets = {}
    if source == "read_lake":
        datasets["train"] = raylake.read_lake(uri, columns=["id", *FEATURES, "label"])
    trainer = TensorflowTrainer(
        train_loop,
        train_loop_config={
            "uri": uri,
            "source": source,
            "out_dir": out_dir,
            "batch_size": batch_size,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=2,
            use_gpu=use_gpu,
            resources_per_worker={"CPU": cpus_per_worker, **({"GPU": 1} if use_gpu else {})},
        ),
        run_config=ray.train.RunConfig(storage_path=out_dir, name=f"tf-{source}"),
        datasets=datasets,
    )
    # Not trainer.fit(): Ray Train leaves its controller actor alive after fit()
    # (docs/training.md, "Ray Train"); raylake.train.fit stops it.
    raylake.train.fit(trainer)
    return [
        json.loads((Path(out_dir) / f"{source}-rank{rank}.json").read_text()) for rank in range(2)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default=None)
    parser.add_argument("--rows", type=int, default=4000)
    args = parser.parse_args()

    import ray
    import tensorflow as tf

    warehouse = Path(args.warehouse or tempfile.mkdtemp(prefix="raylake-train-"))
    uri = str(warehouse / "train_tf_ray")
    if Path(uri).exists():
        shutil.rmtree(uri)
    make_table(uri, args.rows)
    use_gpu = bool(tf.config.list_physical_devices("GPU"))
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    out_dir = tempfile.mkdtemp(prefix="raylake-train-out-")
    for source in ("read_lake", "lake"):
        results = run(uri, source, out_dir, use_gpu=use_gpu)
        check_shards(results, args.rows, whole_epoch=True)
        for r in results:
            print(
                f"{source:>9}: worker {r['rank']}/{r['world']} read {len(r['ids'])} rows in "
                f"{len(r['losses'])} steps, loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
            )
    print("both workers read disjoint shards that together cover the table")


if __name__ == "__main__":
    main()
