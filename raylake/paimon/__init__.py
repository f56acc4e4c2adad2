"""Apache Paimon tables, read natively (docs/paimon.md).

``raylake.open_table(uri)`` recognizes a Paimon table directory and returns a
read-only :class:`PaimonTable`. Paimon's own rules (field ids, ``_KEY_``/
``_SEQUENCE_NUMBER``/``_VALUE_KIND`` columns, levels, deletion vectors, BinaryRow
statistics) stay inside this package.
"""

from raylake.errors import UnsupportedPaimonError
from raylake.io import FileIO
from raylake.paimon.source import PaimonSource
from raylake.paimon.table import PaimonTable, open_paimon_table

FORMAT = PaimonSource.format


def is_paimon_table(file_io: FileIO) -> bool:
    """Whether ``file_io``'s root holds a Paimon table (``schema/schema-<n>`` files)."""
    return PaimonSource(file_io).exists()


__all__ = [
    "FORMAT",
    "PaimonTable",
    "UnsupportedPaimonError",
    "is_paimon_table",
    "open_paimon_table",
]
