"""Primary-key tables: bucket hash, merge planning, merge-on-read, merge engines,
writes, deletes, compaction and changelog (docs/primary-keys.md)."""
