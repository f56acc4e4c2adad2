"""The loaders' epoch keywords are checked before any table is opened or any block read:
a wrong type or value raises InvalidArgumentError naming the keyword (a float batch size
used to fail deep in the read, ``shuffle="false"`` used to shuffle)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from raylake.arguments import check_count, check_flag
from raylake.errors import InvalidArgumentError, StreamArgumentError
from raylake.train.ray import iter_torch_batches
from raylake.train.torch import LakeIterableDataset, LakeStreamDataset

BAD = [
    ({"batch_size": 0}, "batch_size must be an int >= 1, got int 0"),
    ({"batch_size": 8.0}, "batch_size must be an int >= 1, got float 8.0"),
    ({"batch_size": False}, "batch_size must be an int >= 1, got bool False"),
    ({"batch_size": "4"}, "batch_size must be an int >= 1, got str '4'"),
    ({"shuffle": "false"}, "shuffle must be True or False, got str 'false'"),
    ({"seed": -2}, "seed must be an int >= 0, got int -2"),
    ({"seed": 1.5}, "seed must be an int >= 0, got float 1.5"),
    ({"drop_last": 1}, "drop_last must be True or False, got int 1"),
    ({"drop_last": None}, "drop_last must be True or False, got NoneType None"),
]


@pytest.mark.parametrize("loader", [LakeIterableDataset, LakeStreamDataset])
@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_torch_dataset_names_a_bad_keyword_before_opening_the_table(
    tmp_path: Any, loader: type, kwargs: dict[str, Any], message: str
) -> None:
    """Here there is no table: opening it would raise another error."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        loader(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"until_snapshot": "3"}, "until_snapshot must be an int >= 1 or None (no end), got str"),
        ({"until_snapshot": 0}, "until_snapshot must be an int >= 1 or None (no end), got int 0"),
        ({"until_snapshot": -1}, "until_snapshot must be an int >= 1"),
        ({"until_snapshot": 2.5}, "until_snapshot must be an int >= 1"),
        ({"until_snapshot": True}, "until_snapshot must be an int >= 1"),
        ({"idle_timeout": "5"}, "idle_timeout must be a number of seconds >= 0 or None, got str"),
        ({"idle_timeout": -1}, "idle_timeout must be a number of seconds >= 0 or None"),
        ({"idle_timeout": float("nan")}, "idle_timeout must be a number of seconds >= 0"),
    ],
)
def test_the_stream_keywords_are_checked_before_opening_the_table(
    tmp_path: Any, kwargs: dict[str, Any], message: str
) -> None:
    """As poll_interval was: ``until_snapshot=0`` read nothing, ``2.5`` two snapshots, and a
    string failed at the first poll."""
    with pytest.raises(StreamArgumentError, match=re.escape(message)):
        LakeStreamDataset(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle_window": 0}, "shuffle_window must be an int >= 1"),
        ({"feed_bytes": 0}, "feed_bytes must be an int >= 1"),
        ({"feed_bytes": 1.5}, "feed_bytes must be an int >= 1"),
        ({"worker_file_sharing": "yes"}, "worker_file_sharing must be True or False"),
        ({"pin_memory": "false"}, "pin_memory must be True or False"),
        # Parsed as torch parses it, with no GPU needed ("cuda" is a device name here).
        ({"device": "bogus"}, "device must be a torch device ('cpu', 'cuda', 'cuda:1', a torch"),
        ({"device": "cuda:x"}, "device must be a torch device"),
        ({"device": 1.5}, "device must be a torch device"),
        ({"device": -1}, "device must be a torch device"),
    ],
)
def test_the_window_keywords_are_checked_too(
    tmp_path: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        LakeIterableDataset(str(tmp_path / "no-table"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"), [b for b in BAD if set(b[0]) <= {"batch_size", "drop_last"}]
)
def test_ray_batches_name_a_bad_keyword_before_reading_a_block(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):  # when called
        iter_torch_batches(None, **kwargs)  # never asked for a block


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transform": 3}, "transform must be a callable or None, got int 3"),
        ({"feed_bytes": 0}, "feed_bytes must be an int >= 1, got int 0"),
    ],
)
def test_ray_batches_check_their_output_before_reading_a_block(
    kwargs: dict[str, Any], message: str
) -> None:
    """Not at the first batch, after Ray has started reading the dataset."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        iter_torch_batches(Blocks(), **kwargs)


class Blocks:
    """A stand-in for a Ray Dataset that must not be read."""

    def iter_batches(self, **kwargs: Any) -> Any:
        raise AssertionError("a block was read")


def test_checks_return_good_values_and_raise_both_type_and_value_errors() -> None:
    assert check_count("n", 3, 1) == 3
    assert check_flag("f", False) is False
    with pytest.raises(TypeError):
        check_flag("f", 0)
    with pytest.raises(ValueError):
        check_count("n", 0, 1)
