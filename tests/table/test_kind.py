"""Table kinds: one strategy per kind, chosen once, and generic code that never asks which."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import raylake
from raylake.errors import UnsupportedOperationError
from raylake.table import Table
from raylake.table.append import AppendKind
from raylake.table.kind import kind_of
from raylake.table.pk import read as pk_read
from raylake.table.pk.kind import PrimaryKeyKind

PACKAGE = Path(raylake.__file__).parent
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _append(warehouse: Path) -> Table:
    return raylake.create_table(str(warehouse / "a"), SCHEMA)


def _pk(warehouse: Path) -> Table:
    return raylake.create_table(str(warehouse / "p"), SCHEMA, primary_key=["id"], buckets=2)


def test_kind_is_chosen_once_per_schema(warehouse: Path) -> None:
    tbl, pk = _append(warehouse), _pk(warehouse)
    assert isinstance(tbl.kind, AppendKind) and tbl.kind.name == "append"
    assert isinstance(pk.kind, PrimaryKeyKind) and pk.kind.name == "primary-key"
    assert kind_of(pk.table_schema) is kind_of(pk.table_schema)
    assert tbl.kind.default_write_mode == "append" and pk.kind.default_write_mode == "upsert"


def test_kind_refuses_what_it_cannot_do(warehouse: Path) -> None:
    tbl = _append(warehouse)
    with pytest.raises(UnsupportedOperationError, match="'upsert' is not supported"):
        tbl.write(pa.table({"id": [1], "v": ["a"]}), mode="upsert")
    with pytest.raises(UnsupportedOperationError, match="no changelog"):
        tbl.write(pa.table({"id": [1], "v": ["a"]}))
        tbl.changelog(1)


def test_pk_splits_carry_their_merge_sections(warehouse: Path) -> None:
    pk = _pk(warehouse)
    pk.write(pa.table({"id": list(range(10)), "v": ["a"] * 10}))
    pk.write(pa.table({"id": [3, 4, 20], "v": ["b"] * 3}))
    splits = pk.scan().plan()
    assert all(sum(s.sections) == len(s.files) for s in splits)
    assert any(max(s.sections) > 1 for s in splits)
    # Sections travel with the split: a pickled split carries them.
    assert [pickle.loads(pickle.dumps(s)).sections for s in splits] == [s.sections for s in splits]


def test_reads_use_planned_sections_without_recomputing(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pk = _pk(warehouse)
    pk.write(pa.table({"id": list(range(10)), "v": ["a"] * 10}))
    pk.write(pa.table({"id": [3, 4], "v": ["b"] * 2}))
    expected = pk.to_arrow().sort_by("id")
    splits = pk.scan().plan()

    def boom(*args: object) -> None:
        raise AssertionError("sections were recomputed after planning")

    monkeypatch.setattr(pk_read, "overlap_sections", boom)
    rows = pa.Table.from_batches([b for s in splits for b in pk.read_split(s)])
    assert rows.sort_by("id").equals(expected)
    assert pk.kind.exact_row_count(splits[0]) is None or sum(splits[0].sections) >= 1


def test_to_arrow_and_to_batches_agree(warehouse: Path) -> None:
    for tbl in (_append(warehouse), _pk(warehouse)):
        tbl.write(pa.table({"id": list(range(50)), "v": [str(i % 3) for i in range(50)]}))
        tbl.write(pa.table({"id": list(range(25, 75)), "v": ["z"] * 50}))
        for flt in (None, "v = 'z'", "id < 30"):
            whole = tbl.to_arrow(filter=flt, columns=["id"])
            streamed = pa.Table.from_batches(list(tbl.to_batches(filter=flt, columns=["id"])))
            assert whole.sort_by("id").equals(streamed.sort_by("id"))


def test_read_methods_take_options_by_keyword_only(warehouse: Path) -> None:
    tbl = _append(warehouse)
    for method in (tbl.scan, tbl.to_arrow, tbl.to_pandas, tbl.to_batches):
        with pytest.raises(TypeError):
            method(["id"])  # type: ignore[misc]
    with pytest.raises(TypeError):
        tbl.count("id > 1")  # type: ignore[misc]


def test_schema_derived_values_are_computed_once_and_not_pickled(warehouse: Path) -> None:
    ts = _pk(warehouse).table_schema
    assert ts.table_options is ts.table_options
    kind_of(ts)
    restored = pickle.loads(pickle.dumps(ts))
    assert restored == ts and "_derived" not in restored.__dict__


# -- architecture: arrows point down only --------------------------------------------------


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize(
    "module",
    [
        "table/scan.py",
        "table/commit.py",
        "table/table.py",
        "table/catalog.py",
        "table/changes.py",
        "table/changes_scan.py",
    ]
    + [f"datasource/{p.name}" for p in (PACKAGE / "datasource").glob("*.py")]
    # A stream's step and catch-up are Table.changes' mechanism: the kind plans them.
    + [f"streaming/{p.name}" for p in (PACKAGE / "streaming").glob("*.py")]
    + [f"train/{p.name}" for p in (PACKAGE / "train").glob("*.py")]
    # A Spark write routes rows to buckets by asking the kind (TableKind.write_buckets).
    + [f"spark/{p.name}" for p in (PACKAGE / "spark").glob("*.py")],
)
def test_generic_modules_never_ask_for_the_kind(module: str) -> None:
    path = PACKAGE / module
    assert "is_primary_key_table" not in path.read_text().replace(
        "def is_primary_key_table", ""
    ).replace("self.table_schema.is_primary_key_table", "")
    assert not any(m.startswith("raylake.table.pk") for m in _imports(path))
    assert not _kind_questions(path)


# What "which kind is this?" looks like in code: a condition on the primary key or the
# changelog producer, a kind class by name, or a test of a kind's name.
KIND_ATTRIBUTES = {"is_primary_key_table", "primary_key", "changelog_producer"}
KIND_CLASSES = {"PrimaryKeyKind", "AppendKind"}


def _kind_questions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        conditions: list[ast.expr] = []
        if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert):
            conditions.append(node.test)
        elif isinstance(node, ast.comprehension):
            conditions.extend(node.ifs)
        elif isinstance(node, ast.BoolOp):
            conditions.extend(node.values)
        for cond in conditions:
            for sub in ast.walk(cond):
                if isinstance(sub, ast.Attribute) and sub.attr in KIND_ATTRIBUTES:
                    found.append(f"line {sub.lineno}: a condition on .{sub.attr}")
                if (
                    isinstance(sub, ast.Attribute)
                    and sub.attr == "name"
                    and "kind" in ast.unparse(sub.value).lower()
                ):
                    found.append(f"line {sub.lineno}: a test of a kind's name")
        if (
            isinstance(node, ast.Name | ast.alias)
            and getattr(node, "id", getattr(node, "name", None)) in KIND_CLASSES
        ):
            found.append(f"line {node.lineno}: names a kind class")
    return found


# -- one stack for both formats: the source answers, generic code never asks -------------

# The modules that may know which format they read: the sources, and the formats' own.
FORMAT_AWARE = ("table/source.py", "paimon/")
# Plan types, and a format's own (Paimon...) plan, split and file types: generic code
# never tests which it holds (a check of a caller's argument names its type otherwise).
PLAN_TYPES = {"StreamPlan", "StreamPlanBase"}
FORMATS = {"raylake", "paimon"}


def _format_questions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "format" for s in sides) and any(
                isinstance(s, ast.Constant) and s.value in FORMATS for s in sides
            ):
                found.append(f"line {node.lineno}: compares .format with a format")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            for sub in ast.walk(node.args[1]):
                name = sub.id if isinstance(sub, ast.Name) else getattr(sub, "attr", "")
                if name in PLAN_TYPES or name.startswith("Paimon"):
                    found.append(f"line {node.lineno}: isinstance(..., {name})")
    return found


@pytest.mark.parametrize(
    "module",
    sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if not str(p.relative_to(PACKAGE)).startswith(FORMAT_AWARE)
    ),
)
def test_generic_modules_never_ask_for_the_format(module: str) -> None:
    assert not _format_questions(PACKAGE / module)


def test_the_format_question_finder_finds_questions(tmp_path: Path) -> None:
    asking = tmp_path / "asking.py"
    asking.write_text(
        "if tbl.format == 'paimon':\n    pass\n"
        "ok = isinstance(plan, StreamPlan)\n"
        "ok = isinstance(split, PaimonDiffSplit | int)\n"
        "ok = isinstance(f, pa.Table)\n"
        "name = tbl.format\n"
    )
    assert len(_format_questions(asking)) == 3


def test_table_imports_paimon_in_one_module() -> None:
    importing = sorted(
        str(p.relative_to(PACKAGE))
        for p in (PACKAGE / "table").rglob("*.py")
        if any(m.startswith("raylake.paimon") for m in _imports(p))
    )
    assert importing == ["table/source.py"]


def test_the_kind_question_finder_finds_questions(tmp_path: Path) -> None:
    asking = tmp_path / "asking.py"
    asking.write_text(
        "if ts.primary_key:\n    pass\n"
        "x = 1 if kind.name == 'append' else 2\n"
        "from raylake.table.append import AppendKind\n"
        "ok = [k for k in ts.primary_key if k]\n"
    )
    assert len(_kind_questions(asking)) == 3


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("format", ("raylake.table", "raylake.datasource")),
        ("io", ("raylake.table", "raylake.format", "raylake.datasource")),
        ("expr", ("raylake.table", "raylake.format", "raylake.datasource")),
        ("table", ("raylake.datasource", "raylake.spark", "raylake.streaming", "raylake.train")),
    ],
)
def test_layers_import_downwards_only(layer: str, forbidden: tuple[str, ...]) -> None:
    for path in (PACKAGE / layer).rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        bad = [
            m for m in _imports(path) if m.startswith(forbidden) and (rel, m) not in FACADE_IMPORTS
        ]
        assert not bad, f"{rel} imports {bad}"


# The one upward arrow, on purpose: ``Table.stream()`` is the entry point users expect,
# and it imports the streaming package inside the method (never at module import).
FACADE_IMPORTS = {("table/table.py", "raylake.streaming.reader")}


def test_the_stream_facade_imports_lazily() -> None:
    import subprocess
    import sys

    code = "import sys, raylake; raylake.open_table; print('raylake.streaming' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_names_are_importable_and_only_public() -> None:
    import raylake.table as table_pkg

    for name in table_pkg.__all__:
        assert getattr(table_pkg, name) is not None
        assert not name.startswith("_")
    pytest.importorskip("ray")
    import raylake.datasource as ds_pkg

    assert sorted(ds_pkg.__all__) == ["LakeDatasink", "LakeDatasource", "read_lake", "write_lake"]


def test_every_module_imports_first_without_a_cycle() -> None:
    """Each module, imported first in a fresh interpreter, loads: no import cycle bites.

    Importing ``raylake.a.b`` runs the package's ``raylake/__init__.py`` to its end
    before ``raylake.a`` starts, so every module's first import begins from the same
    state: the package loaded. The script loads it once and forks a child to import
    each module from there (re-importing the package for each took most of a minute).
    A first pass imports everything once, so that the children find the third-party
    libraries (torch, pyarrow) loaded, and is then forgotten.
    """
    import subprocess
    import sys

    modules = sorted(
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and not p.relative_to(PACKAGE).parts[0].startswith("datasource")
    )
    script = (
        "import importlib, os, sys, traceback\n"
        "def first_import(name):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:\n"
        "        # An extra this environment lacks (make test-lowest has no Ray or Spark)\n"
        "        # is not a cycle; a raylake module that fails to import is.\n"
        "        missing = type(exc).__name__ == 'MissingDependencyError' or (\n"
        "            exc.name is not None and not exc.name.startswith('raylake'))\n"
        "        if not missing:\n"
        "            raise\n"
        f"modules = {modules!r}\n"
        "for name in modules:\n"
        "    try:\n"
        "        first_import(name)\n"
        "    except BaseException:\n"
        "        pass  # the children below report it\n"
        "for loaded in [m for m in sys.modules if m.startswith('raylake')]:\n"
        "    del sys.modules[loaded]\n"
        "import raylake\n"
        "failed = []\n"
        "for name in modules:\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        try:\n"
        "            first_import(name)\n"
        "        except BaseException:\n"
        "            traceback.print_exc()\n"
        "            sys.stderr.flush()\n"
        "            os._exit(1)\n"
        "        os._exit(0)\n"
        "    if os.waitpid(child, 0)[1] != 0:\n"
        "        failed.append(name)\n"
        "sys.exit(f'these modules fail to import first: {failed}' if failed else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
