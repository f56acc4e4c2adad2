"""Every raylake error crosses a process boundary keeping its type: pickled (Ray tasks,
multiprocessing) with its message and attributes, and rebuilt from its message alone, as
torch's DataLoader re-raises a worker's exception (raylake/error_root.py)."""

from __future__ import annotations

import glob
import inspect
import multiprocessing
import pickle
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raylake
import raylake.errors
from raylake.errors import CorruptMetadataError, NullConstraintError, RaylakeError

CLASSES = sorted(
    (
        c
        for c in vars(raylake.errors).values()
        if isinstance(c, type) and issubclass(c, RaylakeError)
    ),
    key=lambda c: c.__name__,
)

# A value for a parameter of an error's __init__, by its annotation (a string, as the
# error modules postpone annotations).
_SAMPLES = {
    "int": 3,
    "int | None": 3,
    "BaseException": OSError("disk on fire"),
    "BaseException | None": OSError("disk on fire"),
    "list[str]": ["a", "b"],
    "Collection[str]": ["a", "b"],
    "tuple[str, ...]": ("a",),
    "dict[str, Any]": {"id": 1},
}


def _instance(cls: type[RaylakeError]) -> RaylakeError:
    """An instance of ``cls`` made as raylake makes it: every required argument given."""
    init = getattr(cls.__init__, "__wrapped__", cls.__init__)
    args = [
        _SAMPLES.get(str(p.annotation), f"<{p.name}>")
        for p in list(inspect.signature(init).parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return cls(*args) if args else cls("what went wrong")


def test_every_error_class_is_walked() -> None:
    assert len(CLASSES) > 40 and NullConstraintError in CLASSES


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_rebuilt_from_its_message_keeps_its_type(cls: type[RaylakeError]) -> None:
    error = _instance(cls)
    assert type(error) is cls
    assert type(cls(str(error))) is cls
    rebuilt = cls(message=str(error))
    assert type(rebuilt) is cls and str(rebuilt) == str(error) == error.message
    # The attributes it would have set are there, None where only the message crossed.
    assert all(getattr(rebuilt, name) is None for name in error.__dict__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_pickles_with_its_type_message_and_attributes(cls: type[RaylakeError]) -> None:
    error = _instance(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and str(copy) == str(error) and copy.args == error.args
    assert repr(copy.__dict__) == repr(error.__dict__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_torch_reraises_an_error_as_its_own_class(cls: type[RaylakeError]) -> None:
    """torch's ExceptionWrapper rebuilds a worker's exception from its message alone;
    where that failed, a bare RuntimeError came out."""
    ExceptionWrapper = pytest.importorskip("torch._utils").ExceptionWrapper

    try:
        raise _instance(cls)
    except RaylakeError:
        wrapper = ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 0")
    with pytest.raises(cls) as caught:
        wrapper.reraise()
    assert type(caught.value) is cls
    assert str(_instance(cls)) in str(caught.value)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_ray_task_error_is_an_instance_of_the_error(cls: type[RaylakeError]) -> None:
    RayTaskError = pytest.importorskip("ray.exceptions").RayTaskError

    error = _instance(cls)
    sent = pickle.dumps(RayTaskError("read", f"Traceback ...\n{error}", error))
    dual = pickle.loads(sent).as_instanceof_cause()  # what ray.get raises
    assert isinstance(dual, cls) and str(error) in str(dual)
    assert repr(dual.cause.__dict__) == repr(error.__dict__)


def _refuse_nulls(column: str) -> None:
    raise NullConstraintError(column, 2)


def test_an_error_of_a_multiprocessing_worker_keeps_its_type_and_attributes() -> None:
    with (
        multiprocessing.get_context("fork").Pool(1) as pool,
        pytest.raises(NullConstraintError) as caught,
    ):
        pool.apply(_refuse_nulls, ("price",))
    assert caught.value.column == "price" and caught.value.null_count == 2


def test_a_loader_error_in_a_dataloader_worker_keeps_its_type(warehouse: Path) -> None:
    """A data file replaced under the loader's pinned snapshot is refused in the worker
    with CorruptMetadataError (path, reason): it came out as a bare RuntimeError."""
    DataLoader = pytest.importorskip("torch.utils.data").DataLoader
    from raylake.train import LakeIterableDataset

    uri = str(warehouse / "t")
    tbl = raylake.create_table(uri, pa.schema([("x", pa.float32()), ("y", pa.int64())]))
    tbl.write(pa.table({"x": pa.array([1.0, 2.0, 3.0], pa.float32()), "y": [1, 2, 3]}))
    ds = LakeIterableDataset(uri, feature_columns=["x"], label_column="y", batch_size=2)
    for path in glob.glob(uri + "/**/*.parquet", recursive=True):  # fewer rows, same name
        pq.write_table(pq.read_table(path).slice(0, 1), path)
    with pytest.raises(CorruptMetadataError, match="files changed under a pinned snapshot"):
        list(DataLoader(ds, batch_size=None, num_workers=1))


def test_a_message_and_arguments_together_are_refused() -> None:
    with pytest.raises(TypeError):
        RaylakeError("a", message="b")
    assert NullConstraintError("id", 1, key=True).key is True  # its own arguments still bind
    error: Any = NullConstraintError(message="column 'id' is not nullable")
    assert error.column is None and error.null_count is None and error.key is None
