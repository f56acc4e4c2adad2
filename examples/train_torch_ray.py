"""Ray Train + raylake: a TorchTrainer with 2 workers reading one raylake table two ways.

1. ``datasets={"train": read_lake(...)}`` and, in each worker,
   ``raylake.train.iter_torch_batches(ray.train.get_dataset_shard("train"), ...)``
   (Ray Data splits the table between the workers; each block is converted and
   copied to the device once, and batches are views of it);
2. ``LakeIterableDataset`` in each worker: it finds its rank through
   ``torch.distributed`` (which TorchTrainer sets up) and reads its exact share.

Each worker trains a linear model for ``--steps`` steps (one epoch of the tiny table
by default) and writes the ids it saw to ``--out``; the script checks that the two
workers saw disjoint shards that cover the table. GPUs are used when there are some:
a GPU each, or, with fewer GPUs than workers, the workers share them (``gloo`` then
connects the workers, since NCCL refuses two ranks on one device).

    python examples/train_torch_ray.py [--warehouse DIR] [--rows 4000] [--steps 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import raylake
import raylake.train

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

FEATURES = [f"f{i}" for i in range(8)]
SCHEMA = pa.schema(
    [("id", pa.int64()), *[(f, pa.float32()) for f in FEATURES], ("label", pa.float32())]
)


def make_table(uri: str, rows: int) -> raylake.Table:
    """A small regression table: label = sum of the features + noise, in 4 commits."""
    tbl = raylake.create_table(uri, SCHEMA, options={"write.row-group-rows": "500"})
    rng = np.random.default_rng(0)
    for start in range(0, rows, rows // 4):
        n = min(rows // 4, rows - start)
        x = rng.random((n, len(FEATURES)), dtype=np.float32)
        data = {"id": np.arange(start, start + n), **{f: x[:, i] for i, f in enumerate(FEATURES)}}
        data["label"] = x.sum(axis=1) + rng.normal(0, 0.01, n).astype(np.float32)
        tbl.write(pa.table(data, schema=SCHEMA))
    return tbl


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: train a few steps, record which rows it read."""
    import ray.train
    import ray.train.torch
    import torch

    from raylake.train import LakeIterableDataset

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(torch.nn.Linear(len(FEATURES), 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    if config["source"] == "read_lake":
        # Each Ray block is converted once and, on a GPU, copied once; batches are views.
        batches = raylake.train.iter_torch_batches(
            ray.train.get_dataset_shard("train"),
            feature_columns=["id", *FEATURES],
            label_column="label",
            batch_size=config["batch_size"],
            dtype=torch.float32,
            device=device,
        )
    else:
        dataset = LakeIterableDataset(
            config["uri"],
            feature_columns=["id", *FEATURES],
            label_column="label",
            batch_size=config["batch_size"],
            dtype=torch.float32,
            seed=1,
            # On a GPU the dataset copies whole windows itself (pinned, on a side
            # stream) and hands out batches as views of them.
            device=device if device.type == "cuda" else None,
        )
        assert len(dataset) > 0 and dataset.rank_and_world_size() == (rank, world)
        batches = iter(dataset)

    ids: list[int] = []
    losses: list[float] = []
    for step, (x, y) in enumerate(batches):
        if config["steps"] and step >= config["steps"]:
            break
        ids += x[:, 0].long().tolist()
        loss = torch.nn.functional.mse_loss(model(x[:, 1:].float()).squeeze(1), y.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    out = Path(config["out_dir"]) / f"{config['source']}-rank{rank}.json"
    seen = {"rank": rank, "world": world, "ids": ids, "losses": losses, "device": str(device)}
    out.write_text(json.dumps(seen))
    ray.train.report({"loss": losses[-1] if losses else float("nan"), "steps": len(losses)})


def run(
    uri: str,
    source: str,
    out_dir: str,
    *,
    steps: int = 0,
    batch_size: int = 256,
    use_gpu: bool = False,
    cpus_per_worker: float = 0.5,
    gpus: int = 0,
) -> list[dict[str, Any]]:
    """Train with 2 workers on ``source`` ("read_lake" or "lake") and return what each saw.

    With ``use_gpu``, each worker takes ``min(1, gpus / 2)`` of a GPU."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    gpu_share = min(1.0, gpus / 2) if use_gpu else 0.0
    shared_gpu = 0 < gpu_share < 1

    datasets = {}
    if source == "read_lake":
        datasets["train"] = raylake.read_lake(uri, columns=["id", *FEATURES, "label"])
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "uri": uri,
            "source": source,
            "out_dir": out_dir,
            "steps": steps,
            "batch_size": batch_size,
        },
        # Half a CPU per worker leaves one of the two CPUs for Ray Data's read tasks.
        scaling_config=ray.train.ScalingConfig(
            num_workers=2,
            use_gpu=use_gpu,
            resources_per_worker={
                "CPU": cpus_per_worker,
                **({"GPU": gpu_share} if use_gpu else {}),
            },
        ),
        torch_config=TorchConfig(backend="gloo") if shared_gpu else None,
        run_config=ray.train.RunConfig(storage_path=out_dir, name=f"torch-{source}"),
        datasets=datasets,
    )
    # Not trainer.fit(): Ray Train leaves its controller actor alive after fit()
    # (docs/training.md, "Ray Train"); raylake.train.fit stops it.
    raylake.train.fit(trainer)
    return [
        json.loads((Path(out_dir) / f"{source}-rank{rank}.json").read_text()) for rank in range(2)
    ]


def check_shards(results: list[dict[str, Any]], rows: int, whole_epoch: bool) -> None:
    first, second = (set(r["ids"]) for r in results)
    assert not first & second, "the two workers read overlapping rows"
    if whole_epoch:
        assert first | second == set(range(rows)), "the workers together missed rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default=None)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=0, help="steps per worker (0: one epoch)")
    args = parser.parse_args()

    import ray
    import torch

    warehouse = Path(args.warehouse or tempfile.mkdtemp(prefix="raylake-train-"))
    uri = str(warehouse / "train_torch_ray")
    if Path(uri).exists():
        shutil.rmtree(uri)
    make_table(uri, args.rows)
    gpus = torch.cuda.device_count()
    use_gpu = gpus > 0
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    out_dir = tempfile.mkdtemp(prefix="raylake-train-out-")
    for source in ("read_lake", "lake"):
        results = run(uri, source, out_dir, steps=args.steps, use_gpu=use_gpu, gpus=gpus)
        check_shards(results, args.rows, whole_epoch=not args.steps)
        for r in results:
            print(
                f"{source:>9}: worker {r['rank']}/{r['world']} read {len(r['ids'])} rows in "
                f"{len(r['losses'])} steps on {r['device']}, "
                f"loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
            )
    print("both workers read disjoint shards that together cover the table")


if __name__ == "__main__":
    main()
