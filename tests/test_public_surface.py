"""One public surface per package: examples use only it, docs name modules that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import raylake

ROOT = Path(raylake.__file__).parent.parent
PACKAGE = ROOT / "raylake"


def _all_of(module: str) -> list[str]:
    """A package's ``__all__``, read from its source (nothing heavy is imported)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    source = (path / "__init__.py") if path.is_dir() else path.with_suffix(".py")
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            if isinstance(node.value, ast.Call):  # __all__ = sorted(_LAZY)
                return _lazy_names(source)
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _lazy_names(source: Path) -> list[str]:
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def test_internals_stay_out_of_the_table_package_surface() -> None:
    names = _all_of("raylake.table")
    assert not {"ReadContext", "FileSlice", "TableKind"} & set(names)
    from raylake.table.kind import TableKind
    from raylake.table.scan import ReadContext
    from raylake.table.split import FileSlice

    assert all(c is not None for c in (TableKind, ReadContext, FileSlice))


def test_the_train_package_exports_every_loader() -> None:
    import raylake.train

    assert {"iter_torch_batches", "consumed_rows", "to_tf_dataset"} <= set(raylake.train.__all__)
    assert {"LakeIterableDataset", "LakeMapDataset", "LakeStreamDataset"} <= set(
        raylake.train.__all__
    )
    assert callable(raylake.train.consumed_rows)


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_examples_import_only_public_names(example: Path) -> None:
    for node in ast.walk(ast.parse(example.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("raylake"):
            public = _all_of(node.module or "")
            private = [a.name for a in node.names if a.name not in public]
            assert not private, f"{example.name}: {node.module} does not export {private}"
        elif isinstance(node, ast.Import):
            for alias in node.names:  # `import raylake.spark`: a package with a surface
                if alias.name.startswith("raylake"):
                    assert _all_of(alias.name), f"{example.name} imports {alias.name}"


def test_architecture_names_modules_that_exist() -> None:
    """Every module and package in the layout block of docs/architecture.md exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```", 2)[1]
    parents: list[tuple[int, Path]] = []
    named = 0
    for line in block.splitlines():
        match = re.match(r"^( *)(\S+\.py|\S+/)(?=\s|$)", line)
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else ROOT
        path = base / name.rstrip("/")
        assert path.exists(), f"docs/architecture.md names {path.relative_to(ROOT)}"
        named += 1
        if name.endswith("/"):
            parents.append((indent, path))
    assert named > 10


# A path a page or a docstring names: raylake/..., bench/..., tests/..., examples/...
_NAMED_PATH = re.compile(r"\b(?:raylake|bench|tests|examples)/[\w./*-]*[\w*]")


def _named_paths(text: str) -> set[str]:
    return set(_NAMED_PATH.findall(text))


def _exists(path: str) -> bool:
    if "*" in path:  # a pattern: examples/train_*.py
        return any(ROOT.glob(path))
    return (ROOT / path).exists() or (ROOT / path).with_suffix("").exists()


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(PACKAGE.rglob("*.py"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_pages_and_docstrings_name_paths_that_exist(page: Path) -> None:
    text = page.read_text()
    missing = [p for p in sorted(_named_paths(text)) if not _exists(p)]
    assert not missing, f"{page.relative_to(ROOT)} names {missing}"


def test_the_path_finder_finds_paths() -> None:
    text = "see raylake/table/scan.py, raylake/nothing_here.py and examples/train_*.py."
    named = _named_paths(text)
    assert named == {"raylake/table/scan.py", "raylake/nothing_here.py", "examples/train_*.py"}
    assert [p for p in sorted(named) if not _exists(p)] == ["raylake/nothing_here.py"]


def test_errors_a_user_catches_are_exported_from_raylake() -> None:
    assert {"InvalidArgumentError", "ResumeStateError", "RaylakeError"} <= set(raylake.__all__)
    from raylake.errors import InvalidArgumentError, ResumeStateError

    assert raylake.ResumeStateError is ResumeStateError
    assert raylake.InvalidArgumentError is InvalidArgumentError


def test_shared_training_setup_is_defined_once() -> None:
    """The training loaders share one setup (raylake/train/setup.py): the shuffle window,
    the table-and-converter helper and the batch structure each have one definition,
    and the PyTorch module stays split by responsibility."""
    defined: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in names:
                defined.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    for name in ("DEFAULT_SHUFFLE_WINDOW", "table_and_converter", "structure", "LruCache"):
        assert len(defined[name]) == 1, (name, defined[name])
    assert len((PACKAGE / "train" / "torch.py").read_text().splitlines()) < 100


@pytest.mark.ray
def test_reprs_name_the_table_and_the_state(tmp_path: Path) -> None:
    """Writers, schema updates, merges, Ray sinks and streaming jobs showed only their
    class and an address."""
    import pyarrow as pa

    from raylake import LakeDatasink, StreamingJob

    uri = str(tmp_path / "t")
    tbl = raylake.create_table(uri, pa.schema([("id", pa.int64())]), primary_key=["id"])
    keyed = raylake.create_table(uri + "2", pa.schema([("id", pa.int64())]))
    assert (
        repr(tbl.new_writer(file_prefix="job"))
        == f"PrimaryKeyTableWriter({uri!r}, file_prefix='job')"
    )
    assert repr(keyed.new_writer()) == f"AppendTableWriter({uri + '2'!r}, file_prefix='data')"
    update = tbl.update_schema().add_column("x", pa.int8())
    assert repr(update) == f"UpdateSchema({uri!r}, from schema 0, changed)"
    merger = tbl.merge(pa.table({"id": [1]}), on=["id"]).when_not_matched_insert()
    assert repr(merger) == f"TableMerger({uri!r}, on=['id'], 1 clause(s))"
    assert repr(LakeDatasink(uri)) == f"LakeDatasink({uri!r}, mode='upsert')"
    job = StreamingJob(uri, lambda t: t, sink_uri=uri + "2", consumer_id="j")
    assert (
        repr(job)
        == f"StreamingJob({uri!r} -> {uri + '2'!r}, consumer 'j', 1 shard(s), not started)"
    )
