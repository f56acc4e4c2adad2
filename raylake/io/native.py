"""pyarrow's native (C++) filesystems, built from fsspec-style ``storage_options``.

Data files are read and written through pyarrow's own S3 client: its requests run
on pyarrow's I/O threads without the GIL, so a scan keeps many ranged reads in
flight (issue 16). s3fs stays for what only it does well here: the conditional
create of a commit (``If-None-Match``), listings, and small metadata reads in one
GET. Options the native client cannot honour (a profile name, server-side
encryption arguments, requester-pays...) make :func:`native_filesystem` return
None, and FileIO then serves data through s3fs as before: correctness first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

logger = logging.getLogger(__name__)

S3_PROTOCOLS = frozenset({"s3", "s3a"})
# pyarrow's native clients block one I/O thread per request; its default pool (8) caps a
# scan at 8 round trips in flight. Measured in bench/object_store.py at 50 ms per request:
# 16 files in flight need ~32 threads to reach the store's limit.
REMOTE_IO_THREADS = 32

# s3fs options that change nothing about how a data file is read.
_HARMLESS = frozenset(
    {
        "default_block_size",
        "default_fill_cache",
        "default_cache_type",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "skip_instance_cache",
        "cache_regions",
        "max_concurrency",
        "fixed_upload_size",
        "asynchronous",
        "loop",
    }
)
_TOP_LEVEL = frozenset(
    {
        "key",
        "secret",
        "token",
        "anon",
        "endpoint_url",
        "region_name",
        "use_ssl",
        "client_kwargs",
        "config_kwargs",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
    }
)
_CLIENT_KWARGS = frozenset(
    {
        "endpoint_url",
        "region_name",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "use_ssl",
    }
)
_CONFIG_KWARGS = frozenset({"connect_timeout", "read_timeout", "region_name", "retries"})


def native_filesystem(
    protocol: str, options: Mapping[str, Any], root: str
) -> pafs.FileSystem | None:
    """pyarrow's filesystem for this protocol and these options; None where it has none
    (or cannot honour every option given). ``root`` is the table root (``bucket/path``)."""
    if protocol in S3_PROTOCOLS:
        kwargs = s3_arguments(options)
        if kwargs is None:
            return None
        ensure_io_threads(REMOTE_IO_THREADS)
        return pafs.S3FileSystem(**resolve_region(kwargs, root.split("/", 1)[0]))
    return None


def ensure_io_threads(minimum: int) -> None:
    """Grow pyarrow's process-wide I/O thread pool to ``minimum`` (never shrink it: a
    larger size set by the user stays)."""
    if pa.io_thread_count() < minimum:
        pa.set_io_thread_count(minimum)


def s3_arguments(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """``pyarrow.fs.S3FileSystem`` arguments equivalent to s3fs ``options``; None where
    an option has no native equivalent."""
    client = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    unknown = (
        (set(options) - _TOP_LEVEL - _HARMLESS)
        | (set(client) - _CLIENT_KWARGS)
        | (set(config) - _CONFIG_KWARGS)
    )
    if unknown:
        logger.debug("s3 options %s have no native equivalent; data goes through s3fs", unknown)
        return None

    def first(*values: Any) -> Any:
        return next((v for v in values if v is not None), None)

    kwargs: dict[str, Any] = {
        "access_key": first(
            options.get("key"), options.get("aws_access_key_id"), client.get("aws_access_key_id")
        ),
        "secret_key": first(
            options.get("secret"),
            options.get("aws_secret_access_key"),
            client.get("aws_secret_access_key"),
        ),
        "session_token": first(
            options.get("token"),
            options.get("aws_session_token"),
            client.get("aws_session_token"),
        ),
        "region": first(
            client.get("region_name"), options.get("region_name"), config.get("region_name")
        ),
        "anonymous": bool(options.get("anon", False)),
        "connect_timeout": config.get("connect_timeout"),
        "request_timeout": config.get("read_timeout"),
        "retry_strategy": _retry_strategy(config.get("retries")),
    }
    if kwargs["access_key"] is None or kwargs["secret_key"] is None:
        # A key without a secret (or the reverse) is refused by pyarrow; both absent means
        # the AWS credential chain (environment, config files, instance role), as in s3fs.
        kwargs["access_key"] = kwargs["secret_key"] = kwargs["session_token"] = None
    endpoint = first(client.get("endpoint_url"), options.get("endpoint_url"))
    use_ssl = first(client.get("use_ssl"), options.get("use_ssl"))
    if endpoint:
        parts = urlsplit(str(endpoint))
        if parts.scheme:
            kwargs["scheme"] = parts.scheme
            kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        else:
            kwargs["endpoint_override"] = str(endpoint)
    if use_ssl is False:
        kwargs["scheme"] = "http"
    return {k: v for k, v in kwargs.items() if v is not None}


def _retry_strategy(retries: Mapping[str, Any] | None) -> pafs.S3RetryStrategy | None:
    """pyarrow's retry strategy for botocore's ``retries`` config: the same bound, so a
    data file read is tried as often as a metadata read (docs/object-stores.md)."""
    if not retries:
        return None
    total = retries.get("total_max_attempts")
    if total is None and retries.get("max_attempts") is not None:
        total = int(retries["max_attempts"]) + 1  # botocore's max_attempts counts retries
    if total is None:
        return None
    if retries.get("mode") == "legacy":
        return pafs.AwsDefaultS3RetryStrategy(max_attempts=int(total))
    return pafs.AwsStandardS3RetryStrategy(max_attempts=int(total))


def resolve_region(kwargs: dict[str, Any], bucket: str) -> dict[str, Any]:
    """Ask AWS for the bucket's region where neither a region nor an endpoint is given
    (s3fs finds it by itself; the native client would get redirects)."""
    if "region" in kwargs or "endpoint_override" in kwargs or not bucket:
        return kwargs
    try:
        return {**kwargs, "region": pafs.resolve_s3_region(bucket)}
    except OSError as exc:
        logger.debug("could not resolve the region of bucket %s: %s", bucket, exc)
        return kwargs
