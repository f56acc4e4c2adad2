"""Paimon tables that Java Paimon wrote (another reader's test data) read as Java reads them.

Every table either reads equal to the rows that project's tests expect (or, where its
tests expect none, reads without error), or is refused with UnsupportedPaimonError
naming what raylake does not read; nothing else may happen. The tally is printed and
checked against the floor below, and docs/paimon.md's corpus table is checked against
it (tests/paimon/java_corpus.py, `python tests/paimon/java_corpus.py` prints it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from java_corpus import (
    CASES,
    CRASHED,
    DIFFERENT,
    EQUAL,
    NAMES,
    READ,
    REFUSED,
    outcome,
    support_table,
    tally,
)

DOC = Path(__file__).parents[2] / "docs" / "paimon.md"


@pytest.mark.parametrize("name", NAMES)
def test_java_table_reads_as_java_or_is_refused_by_name(name: str) -> None:
    status, detail = outcome(name)
    assert status in (EQUAL, READ, REFUSED), f"{name}: {status}: {detail}"
    if CASES[name]["expected"]:
        assert status in (EQUAL, REFUSED), detail
    if status == REFUSED:
        assert "cannot read the Paimon table" in detail


def test_corpus_tally_and_docs_table() -> None:
    counts = tally()
    print(dict(counts))
    assert counts[CRASHED] == counts[DIFFERENT] == 0
    # Floors, so that a change that turns reads into refusals shows: all 44 tables with
    # Java's rows read equal, 79 of the 93 read.
    assert counts[EQUAL] >= 44, counts
    assert counts[EQUAL] + counts[READ] >= 79, counts
    assert support_table() in DOC.read_text(), "docs/paimon.md's corpus table is stale"
