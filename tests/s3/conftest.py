"""A real S3-compatible HTTP server on 127.0.0.1 for the whole session, a bucket per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")

from raylake.testing.s3server import LocalS3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    with LocalS3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: LocalS3Server) -> str:
    return s3_server.create_bucket()


@pytest.fixture
def storage_options(s3_server: LocalS3Server) -> dict[str, Any]:
    return s3_server.storage_options


@pytest.fixture
def retrying(storage_options: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """``retrying(attempts, backoff_s=0.0)``: the server's storage options with a retry
    bound of ``attempts`` tries and ``backoff_s`` between them, for the tests of
    faults that keep failing (docs/object-stores.md, "Retries")."""

    def options(attempts: int, backoff_s: float = 0.0) -> dict[str, Any]:
        retry = {"max_attempts": attempts, "backoff_s": backoff_s}
        return {**storage_options, "raylake_retry": retry}

    return options
