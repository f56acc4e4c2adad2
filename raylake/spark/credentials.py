"""Credentials for Spark executors: one broadcast variable per job (docs/object-stores.md).

A Spark task's closure is pickled in clear text, so it carries the FileIO with its
secrets by reference only; the secrets themselves go in a broadcast variable, which
the closure names by id. Each task installs them in its Python worker's registry
before it opens the store. With ``spark.io.encryption.enabled`` and
``spark.network.crypto.enabled`` Spark keeps broadcast blocks encrypted on disk and
on the wire.
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext
from pyspark.broadcast import Broadcast

from raylake.io import FileIO
from raylake.io.credentials import export, install


def broadcast_credentials(sc: SparkContext, file_io: FileIO) -> Broadcast[Any] | None:
    """A broadcast of the FileIO's secrets, or None where it has none."""
    fingerprint = file_io.options.fingerprint
    exported = export(fingerprint) if fingerprint is not None else {}
    return sc.broadcast(exported) if exported else None


def install_credentials(credentials: Broadcast[Any] | None) -> None:
    """In a Spark task: make the broadcast secrets known to this Python worker."""
    if credentials is not None:
        install(credentials.value)


def destroy(credentials: Broadcast[Any] | None) -> None:
    """Remove the broadcast from the driver and the executors once the job is done."""
    if credentials is not None:
        credentials.destroy()
