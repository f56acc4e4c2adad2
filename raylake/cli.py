"""The raylake command: look at and maintain tables from a shell."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raylake import __version__
from raylake.cli_args import (
    CommandParser,
    as_of_arg,
    columns_arg,
    consumer_id_arg,
    count_arg,
    positive_arg,
    seconds_arg,
    start_arg,
)
from raylake.cli_args import parse_older_than as parse_older_than
from raylake.cli_json import json_line
from raylake.cli_show import escaped, printable, table_text
from raylake.cli_start import INTERRUPTED, end_startup
from raylake.cli_write import add_write_command, cmd_delete
from raylake.errors import InvalidArgumentError, RaylakeError, UnsupportedPaimonError
from raylake.progress import progress_enabled
from raylake.streaming.splits import ROW_KIND
from raylake.table import Snapshot, Table, open_table
from raylake.table.kind import kind_of


def _open(args: argparse.Namespace) -> Table:
    return open_table(args.uri)


def cmd_info(args: argparse.Namespace) -> int:
    tbl = _open(args)
    ts = tbl.table_schema
    latest = tbl.latest_snapshot()
    info = {
        "uri": tbl.uri,
        "format": tbl.format,
        "kind": kind_of(ts).name,
        "columns": {f.name: str(f.type) for f in ts.arrow_schema},
        "schema_id": ts.schema_id,
        "format_version": ts.format_version,
        "partition_keys": list(ts.partition_keys),
        "primary_key": list(ts.primary_key),
        "buckets": ts.buckets,
        "options": ts.stored_options,
        "latest_snapshot": None if latest is None else latest.id,
        "rows": _live_rows(tbl, latest),
    }
    if tbl.is_primary_key_table:
        # Every version and delete marker in the data files, until compaction merges them.
        info["stored_versions"] = 0 if latest is None else latest.total_record_count
    if latest is not None:
        splits = tbl.scan().plan()
        info["data_files"] = len({p for s in splits for p in s.paths})
    # Names as typed (naïve, 日本), not \u escapes: a user copies them into --columns.
    print(json.dumps(info, indent=2, default=str, ensure_ascii=False))
    return 0


def _live_rows(tbl: Table, snap: Snapshot | None) -> int:
    """Rows a read returns (Table.count): from manifests where they tell, else by a merge
    of the key columns only. Not the snapshot's total_record_count, even for an append
    table: Paimon's data evolution counts a row once per file that holds some of its
    columns, and a fallback branch's rows are in no snapshot of the table's own."""
    if snap is None:
        return 0
    return tbl.count(snapshot_id=snap.id)


def cmd_snapshots(args: argparse.Namespace) -> int:
    tbl = _open(args)
    snaps = tbl.snapshots()
    head = f"{'id':>6}  {'kind':<9}  {'time (UTC)':<23}  {'delta rows':>13}  "
    print(head + f"{'stored rows':>13}  {'live rows':>13}")
    newest = snaps[max(0, len(snaps) - args.live_rows) :] if args.live_rows > 0 else []
    counted = {s.id for s in newest}
    refused: list[str] = []
    for snap in snaps:
        when = snap.time.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
        line = f"{snap.id:>6}  {snap.commit_kind:<9}  {when:<23}  {snap.delta_record_count:>13,}  "
        # Stored rows are the snapshot's metadata; live rows each plan the snapshot (and
        # merge keys where files overlap), so only the newest N are counted.
        live = "-"
        if snap.id in counted:
            try:
                live = f"{_live_rows(tbl, snap):,}"
            except UnsupportedPaimonError as exc:
                # A snapshot raylake refuses to read (a Paimon fallback branch's older
                # schema): the others, and the list, are still worth showing.
                live = "refused"
                refused.append(f"snapshot {snap.id}: {exc}")
        print(line + f"{snap.total_record_count:>13,}  {live:>13}")
    if len(counted) < len(snaps):
        print(f"live rows of the newest {len(counted)} snapshot(s) only: --live-rows N for more")
    for reason in refused:
        print(reason)
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    scan = _open(args).scan(
        columns=args.columns, filter=args.filter, snapshot_id=args.snapshot, as_of=args.as_of
    )
    shown, more = _first_rows(scan.to_batches(), args.limit)
    result = printable(pa.Table.from_batches(shown, schema=scan.output_schema))
    if args.format == "json":
        for row in result.to_pylist():
            print(json_line(row))
    else:
        print(table_text(result))
    if more:
        # Counting is cheap without a filter (manifests, or a key-only merge); with one it
        # would read the filter's columns of the whole table, so say only that more match.
        of = f"of {scan.count():,} rows" if args.filter is None else "rows; more match"
        print(f"showing {result.num_rows:,} {of}: use --limit N to see more", file=sys.stderr)
    return 0


def _first_rows(batches: Iterator[pa.RecordBatch], limit: int) -> tuple[list[pa.RecordBatch], bool]:
    """The first ``limit`` rows, and whether more follow (reads at most one batch more)."""
    shown: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if rows >= limit:
            if batch.num_rows:
                return shown, True
            continue
        take = batch.slice(0, limit - rows)
        shown.append(take)
        rows += take.num_rows
        if take.num_rows < batch.num_rows:
            return shown, True
    return shown, False


def _utc(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def cmd_compact(args: argparse.Namespace) -> int:
    snap = _open(args).compact(full=args.full)
    if snap is None:
        print("nothing to compact")
    else:
        print(f"compacted into snapshot {snap.id} ({snap.total_record_count} rows)")
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    tbl = _open(args)
    result = tbl.expire_snapshots(
        retain_last=args.retain_last,
        older_than=args.older_than,
        consumers_older_than=args.consumers_older_than,
        dry_run=args.dry_run,
    )
    verb = "would expire" if args.dry_run else "expired"
    ids = result.expired_snapshot_ids
    which = f" ({ids[0]}..{ids[-1]})" if ids else ""
    consumers = result.expired_consumer_ids
    print(
        f"{verb} {len(ids)} snapshot(s){which}, "
        f"{len(result.deleted_data_files)} data file(s), "
        f"{len(result.deleted_manifests)} manifest(s)"
        + (f", {len(consumers)} consumer(s) ({', '.join(consumers)})" if consumers else "")
    )
    return 0


def cmd_orphans(args: argparse.Namespace) -> int:
    tbl = _open(args)
    kwargs: dict[str, Any] = {"dry_run": args.dry_run}
    if args.older_than is not None:
        kwargs["older_than"] = args.older_than
    result = tbl.remove_orphan_files(**kwargs)
    for path in result.paths:
        print(path)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {result.files_removed} orphan file(s)")
    return 0


def cmd_consumers(args: argparse.Namespace) -> int:
    if args.snapshot is not None and args.reset is None:  # it would be ignored
        raise InvalidArgumentError("--snapshot", args.snapshot, "given only with --reset ID")
    tbl = _open(args)
    if args.delete is not None:
        if not tbl.delete_consumer(args.delete):
            raise RaylakeError(f"no consumer {args.delete!r} in {tbl.uri}")
        print(f"deleted consumer {args.delete}")
        return 0
    if args.reset is not None:
        if args.snapshot is None:
            raise RaylakeError("--reset needs --snapshot N (the snapshot the consumer reads next)")
        progress = tbl.reset_consumer(args.reset, args.snapshot)
        print(
            f"consumer {progress.consumer_id} now reads snapshot {progress.next_snapshot_id} next"
        )
        return 0
    consumers = tbl.consumers()  # read first: a file that fails to read prints no header
    print(f"{'consumer':<24}  {'next snapshot':>13}  {'updated (UTC)':<19}")
    for progress in consumers:
        print(
            f"{progress.consumer_id:<24}  {progress.next_snapshot_id:>13}  "
            f"{_utc(progress.updated_millis):<19}"
        )
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    """Print each new commit as it arrives (one line per stream plan)."""
    tbl = _open(args)
    # With row kinds: a commit's deletes and before-images are changes it made too (the
    # stream without them delivers upserts, and a delete read as 0 rows).
    reader = tbl.stream(
        consumer_id=args.consumer, start=args.start, poll_interval=args.poll, include_row_kind=True
    )
    print(f"following {tbl.uri} from snapshot {reader.next_snapshot_id}", flush=True)
    try:
        for plan in reader.plans(max_plans=args.max_plans, timeout=args.timeout):
            span = (
                plan.snapshot_id
                if plan.first_snapshot_id == plan.snapshot_id
                else (f"{plan.first_snapshot_id}..{plan.snapshot_id}")
            )
            counts = _kind_counts(plan.to_batches())
            print(
                f"snapshot {span:>9}  {plan.commit_kind:<9}  {plan.kind:<9}  "
                f"{sum(counts.values()):>13,} rows{_row_kinds(counts)}",
                flush=True,
            )
            if args.consumer is not None:
                reader.checkpoint()
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
    return 0


def _kind_counts(batches: Iterator[pa.RecordBatch]) -> dict[str, int]:
    """How many change rows of each kind the batches hold, counted batch by batch: a
    commit may not fit in memory."""
    counts: dict[str, int] = {}
    for batch in batches:
        for c in pc.value_counts(batch.column(ROW_KIND)).to_pylist():
            counts[c["values"]] = counts.get(c["values"], 0) + c["counts"]
    return counts


def _row_kinds(counts: dict[str, int]) -> str:
    """'  (+U 2, -U 2, -D 1)': how many change rows of each kind, where any is not an
    insert ('' for inserts alone)."""
    if all(kind == "+I" for kind in counts):
        return ""
    return "  (" + ", ".join(f"{k} {counts[k]:,}" for k in _KINDS if k in counts) + ")"


_KINDS = ("+I", "-U", "+U", "-D")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="raylake", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="schema, keys, options and size of a table")
    info.add_argument("uri")
    info.set_defaults(func=cmd_info)

    snaps = sub.add_parser("snapshots", help="list the snapshots of a table")
    snaps.add_argument("uri")
    snaps.add_argument(
        "--live-rows",
        type=count_arg,
        default=10,
        metavar="N",
        help="count the rows a read returns of the newest N snapshots (default 10)",
    )
    snaps.set_defaults(func=cmd_snapshots)

    scan = sub.add_parser("scan", help="print rows of a table")
    scan.add_argument("uri")
    scan.add_argument(
        "--columns",
        type=columns_arg,
        help='comma-separated column names; quote one with a comma: "a,b" or `a,b`',
    )
    scan.add_argument("--filter", help="filter, e.g. \"label = 1 and dt = '2024-01-01'\"")
    at = scan.add_mutually_exclusive_group()
    at.add_argument("--snapshot", type=positive_arg, help="read this snapshot id (time travel)")
    at.add_argument("--as-of", type=as_of_arg, help="read the snapshot current at an ISO time")
    scan.add_argument(
        "--limit", type=count_arg, default=20, help="print at most N rows (default 20)"
    )
    scan.add_argument("--format", choices=["table", "json"], default="table")
    scan.set_defaults(func=cmd_scan)

    add_write_command(sub)

    delete = sub.add_parser("delete", help="delete the rows a filter selects, one commit")
    delete.add_argument("uri")
    delete.add_argument("filter", help="e.g. \"dt < '2024-01-01'\" ('true' deletes every row)")
    delete.set_defaults(func=cmd_delete)

    tail = sub.add_parser("tail", help="print commits as they arrive (Ctrl-C to stop)")
    tail.add_argument("uri")
    tail.add_argument(
        "--consumer", type=consumer_id_arg, help="resume from and checkpoint this consumer id"
    )
    tail.add_argument(
        "--start",
        type=start_arg,
        default="latest-new",
        help="latest-new (default), latest, earliest, a snapshot id or an ISO time",
    )
    tail.add_argument("--poll", type=seconds_arg, default=1.0, help="seconds between polls")
    tail.add_argument("--max-plans", type=count_arg, help="stop after N commits")
    tail.add_argument("--timeout", type=seconds_arg, help="stop after N seconds without a commit")
    tail.set_defaults(func=cmd_tail)
    _add_maintenance_commands(sub)
    return parser


def _add_maintenance_commands(sub: Any) -> None:
    compact = sub.add_parser("compact", help="compact the data files of a table")
    compact.add_argument("uri")
    compact.add_argument("--full", action="store_true", help="rewrite every bucket fully")
    compact.set_defaults(func=cmd_compact)

    age_help = "an age (7d, 12h, 30m) or an ISO time"
    expire = sub.add_parser("expire", help="expire old snapshots and the files only they use")
    expire.add_argument("uri")
    expire.add_argument(
        "--retain-last",
        type=positive_arg,
        help="keep at least N newest snapshots (default: table option)",
    )
    expire.add_argument(
        "--older-than", type=parse_older_than, help=f"expire only older snapshots: {age_help}"
    )
    expire.add_argument(
        "--consumers-older-than",
        type=parse_older_than,
        help=f"remove consumers idle since (default: table option): {age_help}",
    )
    expire.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    expire.set_defaults(func=cmd_expire)

    orphans = sub.add_parser("orphans", help="remove files no snapshot references")
    orphans.add_argument("uri")
    orphans.add_argument(
        "--older-than", type=parse_older_than, help=f"only files older than this (1d): {age_help}"
    )
    orphans.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    orphans.set_defaults(func=cmd_orphans)

    consumers = sub.add_parser("consumers", help="list, reset or delete consumers")
    consumers.add_argument("uri")
    action = consumers.add_mutually_exclusive_group()
    action.add_argument(
        "--reset", metavar="ID", type=consumer_id_arg, help="move consumer ID to --snapshot N"
    )
    action.add_argument(
        "--delete", metavar="ID", type=consumer_id_arg, help="unregister consumer ID"
    )
    consumers.add_argument(
        "--snapshot", type=positive_arg, help="with --reset: the next snapshot to read"
    )
    consumers.set_defaults(func=cmd_consumers)


def main(argv: Sequence[str] | None = None) -> int:
    end_startup()  # Ctrl-C from here on is the KeyboardInterrupt below
    try:
        try:
            return _run(argv)
        finally:
            if sys.stdout is not None:  # None: started without one (`raylake ... >&-`)
                sys.stdout.flush()  # here, not at exit, where a failure is only reported
    except BrokenPipeError:
        # The reader went away (`raylake scan ... | head`): the rest is not wanted, so no
        # message, and the status a shell gives a command stopped by the closed pipe.
        _drop_stdout()
        return 128 + 13  # SIGPIPE
    except KeyboardInterrupt:
        # Ctrl-C: the user's stop, not a bug, so no traceback (work it interrupted is
        # undone as a failure is); the status a shell gives a command stopped by SIGINT.
        print("raylake: interrupted", file=sys.stderr)
        return INTERRUPTED


def _drop_stdout() -> None:
    """Point stdout at os.devnull: what is still buffered would fail again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with progress_enabled():  # bars for long work, on a terminal only
            return int(args.func(args))
    except BrokenPipeError:
        raise  # stdout's reader left: no error of the user's to report
    except (RaylakeError, OSError, pa.ArrowException) as exc:
        # A file or store that fails (a data file missing or corrupt, access denied) is
        # the user's to fix, as raylake's own errors are: one line, no traceback. Any
        # other exception is a bug, and keeps its traceback.
        print(f"raylake: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:  # no "[Errno 2]"
        return f"{exc.strerror}: {exc.filename!r}"
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    # pyarrow quotes the bytes it could not parse (a Parquet file read as CSV): NULs and
    # control bytes, shown escaped rather than sent to the terminal.
    return escaped(text)


if __name__ == "__main__":
    sys.exit(main())
