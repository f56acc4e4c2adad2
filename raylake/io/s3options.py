"""S3 ``storage_options`` as both clients of a table take them: checked, and spelled
for s3fs.

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
from collections.abc import Mapping
from typing import Any

from raylake.errors import InvalidOptionError
from raylake.io import retry
from raylake.io.credentials import REDACTED, is_secret

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


def s3_client_options(options: Mapping[str, Any], uri: str) -> dict[str, Any]:
    """The options for both S3 clients of the table at ``uri``."""
    check_s3_keys(options, uri)
    return s3fs_spelling(options)


def check_s3_keys(options: Mapping[str, Any], uri: str) -> None:
    """Refuse a top-level key neither s3fs nor raylake takes, naming it and the table."""
    accepted = accepted_s3_keys()
    for key in options:
        if key in accepted:
            continue
        close = difflib.get_close_matches(str(key), sorted(accepted), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidOptionError(
            f"storage_options[{key!r}]",
            REDACTED if is_secret(str(key)) else options[key],
            f"unknown storage option for {uri}; {hint}S3 tables take the arguments of "
            "s3fs.S3FileSystem and of aiobotocore's session (key, secret, token, anon, "
            "endpoint_url, client_kwargs, config_kwargs, profile, ...), their botocore "
            f"spellings {sorted({*_S3FS_NAMES, *_CLIENT_KWARGS_NAMES})} and raylake's "
            f"{sorted(RAYLAKE_OPTIONS)}",
        )


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
