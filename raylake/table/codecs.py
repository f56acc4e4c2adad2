"""Which codec each column of a new data file is written with.

The table's ``write.compression`` applies to every column, except floating-point ones
that it does not shrink: those are stored uncompressed, so that no read pays a
decompression copy for nothing (the writer asks once per file, raylake/table/writer.py).
"""

from __future__ import annotations

import pyarrow as pa

# A floating-point column whose bytes the codec shrinks by less than this share is
# stored uncompressed (``column_codecs``); the first this many bytes of it are tried.
MIN_COMPRESSION_SAVING = 0.05
_CODEC_SAMPLE_BYTES = 1 << 20


def column_codecs(first: pa.Table, schema: pa.Schema, codec: str) -> str | dict[str, str] | None:
    """Each column's codec in a file whose first row group is ``first``: the table's
    ``write.compression``, except for floating-point columns it does not shrink.

    Floats are written PLAIN (they rarely repeat), and measured or random values
    (features, embeddings) rarely compress either: Snappy then stores them at the same
    size, and every read pays a decompression copy before the PLAIN one (decoding
    costs about a third less uncompressed; docs/primary-keys.md). The codec is tried on
    the first megabyte of each such column of the file's first row group; a column it
    shrinks by less than ``MIN_COMPRESSION_SAVING`` is stored uncompressed. Readers need
    nothing: Parquet records the codec per column chunk.
    """
    if codec == "none":
        return None
    # Parquet names per-column codecs by leaf path, and a column left out is stored
    # uncompressed: only a flat schema's paths are its names.
    if not pa.Codec.is_available(codec) or any(pa.types.is_nested(f.type) for f in schema):
        return codec
    codecs = dict.fromkeys(schema.names, codec)
    for name in schema.names:
        if not pa.types.is_floating(schema.field(name).type) or name not in first.column_names:
            continue
        column = first.column(name)
        if column.num_chunks == 0 or not len(column):
            continue
        chunk = column.chunk(0)
        width = chunk.type.byte_width
        data = chunk.buffers()[1]
        if data is None:
            continue
        sample = data.slice(chunk.offset * width, min(len(chunk) * width, _CODEC_SAMPLE_BYTES))
        if len(sample) and pa.compress(sample, codec=codec).size > len(sample) * (
            1 - MIN_COMPRESSION_SAVING
        ):
            codecs[name] = "none"
    return codecs if "none" in codecs.values() else codec
