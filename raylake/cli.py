"""The ``raylake`` command: look at tables from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from raylake.errors import RaylakeError
from raylake.table import Table, open_table


def _open(args: argparse.Namespace) -> Table:
    return open_table(args.uri)


def cmd_info(args: argparse.Namespace) -> int:
    tbl = _open(args)
    ts = tbl.table_schema
    latest = tbl.latest_snapshot()
    info = {
        "uri": tbl.uri,
        "kind": "primary-key" if ts.is_primary_key_table else "append",
        "columns": {f.name: str(f.type) for f in ts.arrow_schema},
        "partition_keys": list(ts.partition_keys),
        "primary_key": list(ts.primary_key),
        "buckets": ts.buckets,
        "options": dict(ts.options),
        "latest_snapshot": None if latest is None else latest.id,
        "total_records": 0 if latest is None else latest.total_record_count,
    }
    if latest is not None:
        splits = tbl.scan().plan()
        info["data_files"] = len({p for s in splits for p in s.paths})
    print(json.dumps(info, indent=2, default=str))
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    tbl = _open(args)
    print(f"{'id':>6}  {'kind':<9}  {'time (UTC)':<23}  {'delta rows':>11}  {'total rows':>11}")
    for snap in tbl.snapshots():
        when = snap.time.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
        print(
            f"{snap.id:>6}  {snap.commit_kind:<9}  {when:<23}  "
            f"{snap.delta_record_count:>11}  {snap.total_record_count:>11}"
        )
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    tbl = _open(args)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    scan = tbl.scan(columns=columns, filter=args.filter, snapshot_id=args.snapshot)
    rows, shown = 0, []
    for batch in scan.to_batches():
        take = batch if args.limit is None else batch.slice(0, max(args.limit - rows, 0))
        if take.num_rows:
            shown.append(take)
            rows += take.num_rows
        if args.limit is not None and rows >= args.limit:
            break
    import pyarrow as pa

    result = pa.Table.from_batches(shown, schema=scan.output_schema)
    if args.format == "json":
        for row in result.to_pylist():
            print(json.dumps(row, default=str))
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(result.to_pandas().to_string(index=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylake", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="schema, keys, options and size of a table")
    info.add_argument("uri")
    info.set_defaults(func=cmd_info)

    snaps = sub.add_parser("snapshots", help="list the snapshots of a table")
    snaps.add_argument("uri")
    snaps.set_defaults(func=cmd_snapshots)

    scan = sub.add_parser("scan", help="print rows of a table")
    scan.add_argument("uri")
    scan.add_argument("--columns", help="comma-separated column names")
    scan.add_argument("--filter", help="filter, e.g. \"label = 1 and dt = '2024-01-01'\"")
    scan.add_argument("--snapshot", type=int, help="read this snapshot id (time travel)")
    scan.add_argument("--limit", type=int, default=20, help="print at most N rows")
    scan.add_argument("--format", choices=["table", "json"], default="table")
    scan.set_defaults(func=cmd_scan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except RaylakeError as exc:
        print(f"raylake: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
