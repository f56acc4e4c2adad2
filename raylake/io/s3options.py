"""S3 ``storage_options`` as both clients of a table take them: checked, spelled for
s3fs, and completed with the endpoint that AWS's own configuration names.

Two clients serve an S3 table (docs/object-stores.md, "Which client does what"): s3fs
for metadata and commits, pyarrow's native client for data files. They must reach the
same store with the same options, so :func:`s3_client_options` gives both one dict:

- an unknown key is refused with :class:`~raylake.errors.InvalidOptionError` before any
  request, instead of aiobotocore's bare ``TypeError`` from inside s3fs;
- the botocore spellings the docs list at the top level (``region_name``,
  ``aws_access_key_id``...) are translated to s3fs's, which rejects them there;
- an endpoint given only by botocore's configuration (``AWS_ENDPOINT_URL_S3``,
  ``AWS_ENDPOINT_URL``, the profile's ``services`` section or ``endpoint_url``) is
  resolved once, by botocore's own lookup, and written into the options: pyarrow's
  client reads none of those sources and would send data files to AWS.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from raylake.errors import InvalidOptionError
from raylake.io import retry
from raylake.io.credentials import REDACTED, is_secret

logger = logging.getLogger(__name__)

# botocore's names that docs/object-stores.md lists as top-level options, and s3fs's own
# name for each. Where both are given, s3fs's name wins, as in the native mapping.
_S3FS_NAMES = {
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
}
_CLIENT_KWARGS_NAMES = frozenset({"region_name"})
# Options raylake reads itself; FileIO removes them before a client sees the options.
RAYLAKE_OPTIONS = frozenset({retry.OPTION})
# Options fsspec takes from every filesystem's arguments (instance and listings caches):
# s3fs hands these on to fsspec rather than to aiobotocore's session.
_FSSPEC_OPTIONS = frozenset(
    {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"}
)
# botocore signs requests to an endpoint it has no region for as us-east-1.
_BOTOCORE_DEFAULT_REGION = "us-east-1"


def s3_client_options(options: Mapping[str, Any], uri: str) -> tuple[dict[str, Any], bool]:
    """The options for both S3 clients of the table at ``uri``, and whether the endpoint
    they name is known for certain (False where botocore's configuration could not be
    read: then only s3fs, which reads it itself, may serve the table)."""
    check_s3_keys(options, uri)
    spelled = s3fs_spelling(options)
    return with_configured_endpoint(spelled)


def check_s3_keys(options: Mapping[str, Any], uri: str) -> None:
    """Refuse a key neither s3fs nor raylake takes, naming it and the table: at the top
    level, and inside ``client_kwargs`` and ``config_kwargs``, which s3fs hands to
    botocore only at the first request (a bare ``TypeError`` from inside s3fs)."""
    _check_keys(
        options,
        accepted_s3_keys(),
        "storage_options",
        f"unknown storage option for {uri}; S3 tables take the arguments of "
        "s3fs.S3FileSystem and of aiobotocore's session (key, secret, token, anon, "
        "endpoint_url, client_kwargs, config_kwargs, profile, ...), their botocore "
        f"spellings {sorted({*_S3FS_NAMES, *_CLIENT_KWARGS_NAMES})} and raylake's "
        f"{sorted(RAYLAKE_OPTIONS)}",
    )
    for name, accepted, takes in (
        ("client_kwargs", _client_keys(), "the arguments of botocore's create_client"),
        ("config_kwargs", _config_keys(), "the arguments of botocore.config.Config"),
    ):
        nested = options.get(name)
        if nested is None or not accepted:
            continue
        where = f"storage_options[{name!r}]"
        if not isinstance(nested, Mapping):
            raise InvalidOptionError(where, nested, f"expected a dict of {takes}")
        _check_keys(nested, accepted, where, f"unknown {name} key for {uri}; {name} takes {takes}")


def _check_keys(options: Mapping[str, Any], accepted: frozenset[str], where: str, why: str) -> None:
    for key in options:
        if key in accepted:
            continue
        close = difflib.get_close_matches(str(key), sorted(accepted), n=1, cutoff=0.6)
        head, _, tail = why.partition("; ")
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidOptionError(
            f"{where}[{key!r}]",
            REDACTED if is_secret(str(key)) else options[key],
            f"{head}; {hint}{tail}",
        )


@functools.cache
def _client_keys() -> frozenset[str]:
    """What ``client_kwargs`` may hold: botocore's ``create_client`` arguments, but the
    service, which s3fs names."""
    import botocore.session

    return frozenset(_parameters(botocore.session.Session.create_client) - {"service_name"})


@functools.cache
def _config_keys() -> frozenset[str]:
    """What ``config_kwargs`` may hold: botocore's ``Config`` options (empty, and then
    not checked, where a botocore release no longer lists them)."""
    from botocore.config import Config

    return frozenset(getattr(Config, "OPTION_DEFAULTS", {}))


@functools.cache
def accepted_s3_keys() -> frozenset[str]:
    """Every top-level option an S3 table takes: read from the installed s3fs's and
    aiobotocore's signatures (s3fs hands the options it does not name to the session),
    so that no valid s3fs option is ever refused."""
    import s3fs
    from aiobotocore.session import AioSession

    named = _parameters(s3fs.S3FileSystem.__init__) | _parameters(AioSession.__init__)
    return frozenset(named | _FSSPEC_OPTIONS | set(_S3FS_NAMES) | _CLIENT_KWARGS_NAMES) | (
        RAYLAKE_OPTIONS
    )


def _parameters(function: Any) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(function).parameters.values()
    return {p.name for p in parameters if p.kind in kinds and p.name != "self"}


def s3fs_spelling(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with botocore's top-level names moved to where s3fs takes them."""
    spelled = {k: v for k, v in options.items() if k not in _S3FS_NAMES}
    for botocore_name, s3fs_name in _S3FS_NAMES.items():
        if options.get(botocore_name) is not None:
            spelled.setdefault(s3fs_name, options[botocore_name])
    region = spelled.pop("region_name", None)
    if region is not None:
        client = dict(spelled.get("client_kwargs") or {})
        client.setdefault("region_name", region)
        spelled["client_kwargs"] = client
    return spelled


def with_configured_endpoint(options: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The options with the endpoint and region botocore's configuration gives S3
    clients, where the options name no endpoint; and whether the endpoint is known."""
    client = dict(options.get("client_kwargs") or {})
    if options.get("session") is not None:
        # A session of the caller's own: its configuration, not the environment's, is
        # s3fs's; pyarrow's client is not used with it (raylake/io/native.py).
        return options, True
    if options.get("endpoint_url") or client.get("endpoint_url"):
        return _with_region(options, client), True
    try:
        endpoint = configured_endpoint(options)
    except (ImportError, AttributeError, TypeError) as exc:
        # botocore's lookup is not a public API: where it changed, s3fs (which uses it)
        # still finds the endpoint, and pyarrow's client must not guess.
        logger.debug("could not read botocore's endpoint configuration: %r", exc)
        return options, False
    if endpoint is None:
        return options, True
    client["endpoint_url"] = endpoint
    return _with_region(options, client), True


def configured_endpoint(options: Mapping[str, Any]) -> str | None:
    """The endpoint botocore gives an S3 client made without one: its own lookup, in its
    order (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's ``services``
    section, its ``endpoint_url``), unless configured endpoints are ignored."""
    import botocore.session
    from botocore.configprovider import ConfiguredEndpointProvider

    ignore = (options.get("config_kwargs") or {}).get("ignore_configured_endpoint_urls")
    session = botocore.session.Session(profile=options.get("profile"))
    if ignore is None:
        ignore = session.get_config_variable("ignore_configured_endpoint_urls")
    if ignore:
        return None
    provider = ConfiguredEndpointProvider(
        full_config=session.full_config, scoped_config=session.get_scoped_config(), client_name="s3"
    )
    endpoint = provider.provide()
    return str(endpoint) if endpoint else None


def _with_region(options: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
    """The options with the region botocore signs with for an endpoint, where none is
    given: pyarrow's client would read ``AWS_REGION``, which botocore does not, and sign
    for another region than the metadata requests (a server that checks, MinIO with a
    region set, refuses one of the two)."""
    config = options.get("config_kwargs") or {}
    if client.get("region_name") or config.get("region_name"):
        return {**options, "client_kwargs": client}
    import botocore.session

    session = botocore.session.Session(profile=options.get("profile"))
    region = session.get_config_variable("region") or _BOTOCORE_DEFAULT_REGION
    return {**options, "client_kwargs": {**client, "region_name": region}}
