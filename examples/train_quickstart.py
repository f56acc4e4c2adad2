"""Train a small PyTorch model from a raylake table: `make demo` runs this (CPU, seconds).

It writes a table of 16 features and a label in three commits, trains a logistic
regression for two epochs through a DataLoader with 2 workers, stops the third epoch
half-way, saves the loader's position with the model, and resumes it in a "new job"
with another worker count: the epoch's rows are read exactly once in all.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader

import raylake
from raylake.train import LakeIterableDataset, LakeMapDataset, RandomBatchSampler, consumed_rows

FEATURES = [f"f{i}" for i in range(16)]
SCHEMA = pa.schema(
    [("id", pa.int64()), *[(f, pa.float32()) for f in FEATURES], ("label", pa.float32())]
)
ROWS_PER_COMMIT = 20_000


def make_table(uri: str) -> raylake.Table:
    tbl = raylake.create_table(uri, SCHEMA, options={"write.row-group-rows": "4096"})
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=len(FEATURES)).astype(np.float32)
    for commit in range(3):
        x = rng.normal(size=(ROWS_PER_COMMIT, len(FEATURES))).astype(np.float32)
        start = commit * ROWS_PER_COMMIT
        data = {"id": np.arange(start, start + ROWS_PER_COMMIT)}
        data |= {f: x[:, i] for i, f in enumerate(FEATURES)}
        data["label"] = (x @ true_w > 0).astype(np.float32)
        tbl.write(pa.table(data, schema=SCHEMA))
    return tbl


def dataset(tbl: raylake.Table) -> LakeIterableDataset:
    # "id" rides along as the first feature so that the demo can count rows.
    return LakeIterableDataset(
        tbl,
        feature_columns=["id", *FEATURES],
        label_column="label",
        batch_size=512,
        shuffle=True,
        seed=42,
        dtype=torch.float32,
    )


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default="./warehouse")
    args = parser.parse_args()
    t0 = time.perf_counter()
    uri = str(Path(args.warehouse) / "training")
    if Path(uri).exists():
        shutil.rmtree(uri)

    section("a training table: 60,000 rows, 16 features, 3 commits")
    tbl = make_table(uri)
    ds = dataset(tbl)
    print(f"{ds}: {len(ds)} batches of 512 per epoch")

    section("train a logistic regression: 2 epochs, DataLoader with 2 workers")
    torch.manual_seed(0)
    model = torch.nn.Linear(len(FEATURES), 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(2):
        ds.set_epoch(epoch)  # a new order every epoch, the same on every rank
        losses, correct, seen = [], 0, 0
        for x, y in loader:
            logits = model(x[:, 1:]).squeeze(1)
            loss = loss_fn(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += int(((logits > 0).float() == y).sum())
            seen += len(y)
        print(
            f"epoch {epoch}: {seen} rows, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
            f"accuracy {correct / seen:.3f}"
        )

    section("stop epoch 2 half-way, save the position with the model")
    ds.set_epoch(2)
    first_half: list[int] = []
    for step, (x, _) in enumerate(ds):  # in-process: the dataset counts what it yielded
        first_half += x[:, 0].long().tolist()
        if step + 1 == len(ds) // 2:
            break
    checkpoint = {"model": model.state_dict(), "data": ds.state_dict()}
    state = checkpoint["data"]
    print(
        f"position: table {Path(state['table']).name}, snapshot {state['snapshot_id']}, "
        f"epoch {state['epoch']}, {consumed_rows(state)} of {state['total_rows']} rows read"
    )

    section("resume in a new job with 1 worker: exactly the rest of the epoch")
    resumed = dataset(raylake.open_table(uri))
    resumed.load_state_dict(checkpoint["data"])
    model.load_state_dict(checkpoint["model"])
    rest = [int(i) for x, _ in DataLoader(resumed, batch_size=None, num_workers=1) for i in x[:, 0]]
    total = first_half + rest
    print(
        f"{len(first_half)} + {len(rest)} rows; every row once: "
        f"{sorted(total) == list(range(3 * ROWS_PER_COMMIT))}"
    )

    section("map-style access by global row index")
    rows = LakeMapDataset(tbl, feature_columns=FEATURES, label_column="label")
    x, y = rows[[0, 31_000, 59_999]]
    print(
        f"{len(rows)} rows; ds[[0, 31000, 59999]] -> features {tuple(x.shape)}, labels {y.tolist()}"
    )
    # Shuffled batches for a map-style DataLoader, each batch of indices made in one step.
    sampler = RandomBatchSampler(rows, 4096, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(rows, batch_sampler=sampler, collate_fn=LakeMapDataset.collate)
    labels = torch.cat([label for _, label in loader])
    print(f"an epoch of RandomBatchSampler: {len(sampler)} batches, {len(labels)} rows")
    print(f"\ndone in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
