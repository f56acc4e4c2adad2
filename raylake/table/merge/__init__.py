"""MERGE INTO for lake tables: ``Table.merge(source, on=...)`` (docs/merge.md)."""

from raylake.table.merge.builder import MergeResult, TableMerger

__all__ = ["MergeResult", "TableMerger"]
