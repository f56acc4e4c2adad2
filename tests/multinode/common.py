"""What the multi-node scripts share: a process environment without AWS credentials."""

from __future__ import annotations

import os
import tempfile


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


def private_ray_tmpdir() -> None:
    """Ray files under a directory of this run: ``Cluster`` writes the address of its head
    into ``<tmp>/ray/ray_current_cluster``, and a plain ``ray.init()`` elsewhere on the
    machine would join this cluster while it runs."""
    if "RAY_TMPDIR" not in os.environ:
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rl-", dir="/tmp")
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
