"""Apache Paimon tables, read natively (docs/paimon.md).

``raylake.open_table(uri)`` recognizes a Paimon table directory and returns a
read-only :class:`PaimonTable`. Paimon's own rules (field ids, ``_KEY_``/
``_SEQUENCE_NUMBER``/``_VALUE_KIND`` columns, levels, deletion vectors, BinaryRow
statistics) stay inside this package.
"""

from raylake.errors import UnsupportedPaimonError
from raylake.paimon.table import FORMAT, PaimonTable, is_paimon_table, open_paimon_table

__all__ = [
    "FORMAT",
    "PaimonTable",
    "UnsupportedPaimonError",
    "is_paimon_table",
    "open_paimon_table",
]
