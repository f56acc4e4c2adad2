"""LakeMapDataset under ``DataLoader(ds, batch_size=1024, sampler=RandomSampler(ds))``:
the code before a change against the code after, alternately, in one run.

Each round runs one process per (tree, collate): the tree before with the default
collate (samples, then stacked again), the tree after with the default collate and
with ``collate_fn=LakeMapDataset.collate`` (the gathered batch as it is), the same
collate with ``batch_sampler=RandomBatchSampler(ds, ...)`` (the same batches, each made
in one step, against torch's RandomSampler and BatchSampler), and for reference
``ds[list]`` under ``BatchSampler`` with ``batch_size=None``. Each process
decodes every piece once (the cache holds the table, as random access wants), then
times ``--batches`` batches of a seeded RandomSampler, best of ``--repeat`` passes,
wall and CPU seconds. The summary gives ranges over the rounds and each round's
ratio to the tree before.

    git archive <commit> raylake | tar -x -C /tmp/before
    python bench/map_batches.py --before /tmp/before --after . [--rows 2000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIDES = (
    ("before", "default"),
    ("after", "default"),
    ("after", "collate"),
    ("after", "batched"),  # ds[list] under a BatchSampler, batch_size=None: for reference
    ("after", "sampler"),  # raylake's RandomBatchSampler and the collate
)


def child(uri: str, collate: str, batches: int, batch_size: int, repeat: int) -> None:
    """In a child process: passes of the DataLoader, one JSON line (best wall and CPU)."""
    import numpy as np
    import torch
    from _synthetic import FEATURES
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    import raylake
    from raylake.train.torch import LakeMapDataset

    ds = LakeMapDataset(raylake.open_table(uri), feature_columns=FEATURES, label_column="label")
    ds[np.arange(len(ds))]  # every piece decoded into the cache once
    extra: dict[str, Any] = {"collate_fn": ds.collate} if collate == "collate" else {}

    def one_pass(seed: int) -> int:
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
        if collate == "batched":
            batches_of = BatchSampler(sampler, batch_size, False)
            loader = DataLoader(ds, sampler=batches_of, batch_size=None)
        elif collate == "sampler":
            from raylake.train import RandomBatchSampler

            fast = RandomBatchSampler(ds, batch_size, generator=torch.Generator().manual_seed(seed))
            loader = DataLoader(ds, batch_sampler=fast, collate_fn=ds.collate)
        else:
            loader = DataLoader(ds, batch_size=batch_size, sampler=sampler, **extra)
        n = 0
        for k, (_, label) in enumerate(loader):
            n += len(label)
            if k + 1 == batches:
                break
        return n

    rows = one_pass(0)  # warm-up
    wall, cpu = float("inf"), float("inf")
    for r in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        one_pass(r + 1)
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    print(json.dumps({"raylake": raylake.__file__, "rows": rows, "wall": wall, "cpu": cpu}))


def run(src: str, uri: str, collate: str, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(src).resolve()), str(HERE)]))
    cmd = [sys.executable, __file__, "--child", collate, "--uri", uri, "--batches",
           str(args.batches), "--batch-size", str(args.batch_size), "--repeat", str(args.repeat)]  # fmt: skip
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="raylake source tree of the baseline")
    parser.add_argument("--after", default=".", help="raylake source tree of the change")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dir", default=str(HERE / ".data" / "map_batches"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--child", choices=[c for _, c in SIDES], help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.uri, args.child, args.batches, args.batch_size, args.repeat)
        return
    if not args.before:
        parser.error("--before is required")
    from _synthetic import build_table

    uri = str(build_table(Path(args.dir), args.rows).uri)
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for side, collate in SIDES:
            got.setdefault((side, collate), []).append(run(getattr(args, side), uri, collate, args))
        base = got["before", "default"][r]
        line = "  ".join(
            f"{side} {collate}: {base['wall'] / got[side, collate][r]['wall']:.2f}x wall, "
            f"{base['cpu'] / got[side, collate][r]['cpu']:.2f}x cpu"
            for side, collate in SIDES[1:]
        )
        fast = got["after", "collate"][r]["wall"] / got["after", "sampler"][r]["wall"]
        print(f"round {r + 1} (speed-up over before): {line}; sampler / collate {fast:.2f}x",
              flush=True)  # fmt: skip
    rows = got["before", "default"][0]["rows"]
    print(f"\n{rows:,} rows a pass; ranges over {args.rounds} rounds (best of {args.repeat})")
    print(f"{'':<18}{'rows/s':>18}{'wall s':>16}{'CPU s':>16}")
    for side, collate in SIDES:
        runs = got[side, collate]
        wall = sorted(x["wall"] for x in runs)
        cpu = sorted(x["cpu"] for x in runs)
        print(f"{side + ' ' + collate:<18}{rows / wall[-1] / 1e6:>8.2f}M-{rows / wall[0] / 1e6:.2f}M"
              f"{wall[0]:>9.3f}-{wall[-1]:.3f}{cpu[0]:>9.3f}-{cpu[-1]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
