"""Keeping credentials out of pickles, reprs, logs and errors.

``storage_options`` may hold secrets (an S3 key and secret, a session token, a
password). A FileIO travels inside every Ray read task, Spark task and Torch
worker, so it must not carry them: a pickled task is stored in Ray's object
store and logs, and Spark ships closures in clear text. Instead:

- the secret options are split off and kept in a per-process registry, keyed by
  a fingerprint (a hash that reveals nothing); a pickled FileIO carries only the
  fingerprint and the non-secret options (endpoint, region, ...);
- a FileIO unpickled in the same process, or in a forked child (Torch
  DataLoader workers, multiprocessing), finds its secrets in the registry;
- anywhere else (a Ray worker, a Spark executor) the store's own credential
  chain applies: environment variables, config files, instance roles. For S3,
  ``s3_environment(storage_options)`` gives the variables to set there, and
  raylake's Ray entry points pass them through the task's runtime environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

# Option names that hold secrets, at any nesting depth (client_kwargs, config_kwargs...).
_SECRET_NAME = re.compile(
    r"(^key$|secret|token|password|passwd|credential|access_key|account_key|sas|signature)",
    re.IGNORECASE,
)
REDACTED = "***"

_registry: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


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


def remember(secret: Mapping[str, Any]) -> str | None:
    """Keep secrets in this process; return the fingerprint that finds them (None: none)."""
    if not secret:
        return None
    digest = hashlib.sha256(json.dumps(secret, sort_keys=True, default=str).encode())
    fingerprint = digest.hexdigest()[:24]
    with _lock:
        _registry[fingerprint] = dict(secret)
    return fingerprint


def recall(fingerprint: str | None) -> dict[str, Any]:
    """The secrets this process knows for a fingerprint; empty where it knows none."""
    if fingerprint is None:
        return {}
    with _lock:
        return dict(_registry.get(fingerprint, {}))


def s3_environment(options: Mapping[str, Any]) -> dict[str, str]:
    """AWS environment variables that give a worker the credentials of s3fs options."""
    names = {
        "key": "AWS_ACCESS_KEY_ID",
        "secret": "AWS_SECRET_ACCESS_KEY",
        "token": "AWS_SESSION_TOKEN",
        "aws_access_key_id": "AWS_ACCESS_KEY_ID",
        "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "aws_session_token": "AWS_SESSION_TOKEN",
    }
    env: dict[str, str] = {}
    for source in (options, options.get("client_kwargs") or {}):
        for name, variable in names.items():
            value = source.get(name)
            if value:
                env[variable] = str(value)
    return env
