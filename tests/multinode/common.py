"""What the multi-node scripts share: a process environment without AWS credentials."""

from __future__ import annotations

import os


def clear_aws_environment() -> None:
    """No AWS credentials anywhere in this process or its children: whatever reaches a
    worker came through raylake. Also keeps botocore off the instance-metadata service."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
