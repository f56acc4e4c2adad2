"""Credentials that reach every process doing the work, never in clear-text pickles.

``storage_options`` may hold secrets (an S3 key and secret, a session token, a
password). They travel inside every Ray read task, write task, streaming actor,
Spark task and DataLoader worker, so :class:`StorageOptions` splits them off:

- the secrets stay in a per-process registry under a fingerprint (a hash that
  reveals nothing); a pickled ``StorageOptions`` carries the fingerprint, the public
  options (endpoint, region, ...) and, where Ray is initialized in the pickling
  process, a reference to the secrets in the Ray object store
  (raylake/io/ray_share.py), which a Ray worker on any node resolves with ``ray.get``;
- pickled into the pipe of a process being spawned (``multiprocessing`` spawn or
  forkserver: DataLoader workers), the secrets go along, to that one child;
- Spark tasks get them from a broadcast variable (raylake/spark/credentials.py);
- a process with none of these uses the store's own credential chain (environment,
  config files, instance roles), and where that has nothing either, raises
  :class:`~raylake.errors.MissingCredentialsError` before any request is made.

docs/object-stores.md says what is in clear text where, and why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing import context as mp_context
from typing import Any, TypeAlias

from raylake.arguments import check_mapping
from raylake.caching import ProcessLock
from raylake.errors import MissingCredentialsError

logger = logging.getLogger(__name__)

# Option names that hold secrets, at any nesting depth (client_kwargs, config_kwargs...).
_SECRET_NAME = re.compile(
    r"(^key$|secret|token|password|passwd|credential|access_key|account_key|sas|signature)",
    re.IGNORECASE,
)
REDACTED = "***"
# Options that hand s3fs its own way to credentials: no chain check then.
_S3_CREDENTIAL_OPTIONS = ("anon", "profile", "session")
# Environment variables of the AWS credential chain (botocore's providers read them).
_AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@dataclass
class _Known:
    """Secrets this process knows, and their copy in the Ray object store (if shared)."""

    secret: dict[str, Any]
    ref: Any = None  # a ray.ObjectRef
    session: str | None = None  # the Ray session that ref belongs to


_registry: dict[str, _Known] = {}
_lock = ProcessLock()
_chain_found = False


def is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def split_secrets(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public options, secret options); nested dicts are split the same way."""
    public: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    for name, value in options.items():
        if is_secret(str(name)):
            secret[name] = value
        elif isinstance(value, Mapping):
            inner_public, inner_secret = split_secrets(value)
            public[name] = inner_public
            if inner_secret:
                secret[name] = inner_secret
        else:
            public[name] = value
    return public, secret


def merge_options(public: Mapping[str, Any], secret: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(public)
    for name, value in secret.items():
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = merge_options(merged[name], value)
        else:
            merged[name] = value
    return merged


def redacted(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with every secret value replaced, for messages and reprs."""
    public, secret = split_secrets(options)
    return merge_options(public, _mask(secret))


def _mask(secret: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _mask(v) if isinstance(v, Mapping) else REDACTED for k, v in secret.items()}


# -- the per-process registry -----------------------------------------------------------


def fingerprint_of(secret: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(secret, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:24]


def remember(secret: Mapping[str, Any]) -> str | None:
    """Keep secrets in this process; return the fingerprint that finds them (None: none)."""
    if not secret:
        return None
    fingerprint = fingerprint_of(secret)
    with _lock:
        if fingerprint not in _registry:
            _registry[fingerprint] = _Known(dict(secret))
    return fingerprint


def recall(fingerprint: str | None) -> dict[str, Any] | None:
    """The secrets this process knows for a fingerprint; None where it knows none."""
    if fingerprint is None:
        return {}
    with _lock:
        known = _registry.get(fingerprint)
        return None if known is None else dict(known.secret)


def export(fingerprint: str) -> dict[str, dict[str, Any]]:
    """``{fingerprint: secrets}`` where this process knows them, for :func:`install`
    in another process (a Spark broadcast, a spawned child)."""
    secret = recall(fingerprint)
    return {} if not secret else {fingerprint: secret}


def install(exported: Mapping[str, Mapping[str, Any]]) -> None:
    """Register secrets another process exported (each checked against its fingerprint)."""
    for fingerprint, secret in exported.items():
        if fingerprint_of(secret) != fingerprint:
            raise ValueError("the installed secrets do not match their fingerprint")
        remember(secret)


def shared_ref(fingerprint: str, session: str) -> Any:
    """The object-store reference to these secrets made in this Ray session, if any."""
    with _lock:
        known = _registry.get(fingerprint)
        return known.ref if known is not None and known.session == session else None


def set_shared_ref(fingerprint: str, secret: Mapping[str, Any], ref: Any, session: str) -> None:
    with _lock:
        _registry[fingerprint] = _Known(dict(secret), ref, session)


# -- options that carry their secrets by reference --------------------------------------


class StorageOptions:
    """``storage_options`` whose secrets never travel in a clear-text pickle.

    :meth:`resolve` gives the full options (secrets included) in whichever process
    it runs: the one that was given them, a Ray worker (through the object store), a
    spawned child, a Spark task (through a broadcast).
    """

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        public, secret = split_secrets(check_mapping("storage_options", options) or {})
        self.public = public
        self.fingerprint = remember(secret)
        self._shared: bytes | None = None  # a pickled ObjectRef from the process that sent us

    @classmethod
    def of(cls, options: Mapping[str, Any] | StorageOptions | None) -> StorageOptions:
        if isinstance(options, StorageOptions):
            return options
        return cls(options)

    @property
    def has_secrets(self) -> bool:
        return self.fingerprint is not None

    def resolve(self, uri: str) -> dict[str, Any]:
        """The options with their secrets, for a client of the store at ``uri``.

        Raises MissingCredentialsError where this process can get no credentials at
        all: neither the secrets given on the driver nor the store's own chain.
        """
        if self.fingerprint is None:
            if not chain_has_credentials(uri, self.public):
                raise MissingCredentialsError(
                    uri, "storage_options hold no credentials and the store's own credential "
                    "chain (environment, config files, instance role) has none either"
                )  # fmt: skip
            return dict(self.public)
        secret, reason = self._lookup()
        if secret is None:
            if not chain_has_credentials(uri, self.public):
                raise MissingCredentialsError(uri, reason)
            logger.debug("%s: using the store's credential chain (%s)", uri, reason)
            secret = {}
        return merge_options(self.public, secret)

    def _lookup(self) -> tuple[dict[str, Any] | None, str]:
        """The secrets (None where this process cannot get them) and, if None, why."""
        secret = recall(self.fingerprint)
        if secret is not None:
            return secret, ""
        if self._shared is not None:
            from raylake.io import ray_share

            assert self.fingerprint is not None
            return ray_share.fetch(self.fingerprint, self._shared)
        return None, (
            "the secrets given in storage_options on the driver did not reach this process "
            "(it is not a Ray worker of a driver that had Ray initialized, nor a process "
            "spawned by it, nor a Spark task of a raylake Spark job)"
        )

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {"public": self.public, "fingerprint": self.fingerprint}
        if self.fingerprint is None:
            return state
        if mp_context.get_spawning_popen() is not None:
            # Pickled into the pipe to one child being spawned (a DataLoader worker): the
            # bytes go to that process only and are never stored.
            state["spawn_secret"] = self._lookup()[0]
            return state
        from raylake.io import ray_share

        state["shared"] = ray_share.share(self.fingerprint) or self._shared
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.public = state["public"]
        self.fingerprint = state["fingerprint"]
        self._shared = state.get("shared")
        if state.get("spawn_secret") and self.fingerprint is not None:
            install({self.fingerprint: state["spawn_secret"]})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StorageOptions):
            return NotImplemented
        return (self.public, self.fingerprint) == (other.public, other.fingerprint)

    def __hash__(self) -> int:
        return hash((json.dumps(self.public, sort_keys=True, default=str), self.fingerprint))

    def __repr__(self) -> str:
        secrets = REDACTED if self.fingerprint else "none"
        return f"StorageOptions({self.public!r}, secrets={secrets})"


OptionsLike: TypeAlias = Mapping[str, Any] | StorageOptions


def chain_has_credentials(uri: str, public: Mapping[str, Any]) -> bool:
    """Whether the store's own credential chain can sign requests in this process.

    Checked for S3 (the chain of botocore, which s3fs uses); other stores are given
    the benefit of the doubt. A positive answer is remembered for the process.
    """
    global _chain_found
    if _chain_found or not uri.startswith(("s3://", "s3a://")):
        return True
    if any(public.get(name) for name in _S3_CREDENTIAL_OPTIONS):
        return True
    if any(os.environ.get(name) for name in _AWS_ENV):
        _chain_found = True
        return True
    try:
        import botocore.session
    except ImportError:  # pragma: no cover - s3fs depends on botocore
        return True
    _chain_found = botocore.session.get_session().get_credentials() is not None
    return _chain_found
