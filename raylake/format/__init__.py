"""The on-disk format, one module per section of docs/format.md.

schema and types (the schema file), options (table options), snapshot (snapshot
files), manifest (manifest files and lists), stats (per-column statistics) and
consumer (consumer progress files). Nothing here knows about scans, writers or
table kinds; ``raylake.table`` builds on it.
"""
