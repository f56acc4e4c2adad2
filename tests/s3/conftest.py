"""A real S3-compatible HTTP server on 127.0.0.1 for the whole session, a bucket per test."""

from __future__ import annotations

from collections.abc import Iterator
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
