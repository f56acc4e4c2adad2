"""The ``raylake`` command's flags refuse bad values naming the flag, before any work."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.cli import main


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["scan", "{t}", "--snapshot", "0"], "--snapshot"),
        (["expire", "{t}", "--retain-last", "0"], "--retain-last"),
        (["consumers", "{t}", "--reset", "c", "--snapshot", "-1"], "--snapshot"),
        (["write", "{t}", "{t}/x.csv", "--create", "--buckets", "0"], "--buckets"),
    ],
)
def test_counts_below_one_are_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    """They were refused by the method they went to, naming its keyword (snapshot_id,
    retain_last, next_snapshot_id, buckets), which no shell user typed."""
    uri = str(tmp_path / "t")
    raylake.create_table(uri, pa.schema([("id", pa.int64())])).write(pa.table({"id": [1]}))
    with pytest.raises(SystemExit) as info:
        main([a.format(t=uri) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {flag}: " in err and "a whole number >= 1" in err
    assert len(raylake.open_table(uri).snapshots()) == 1
