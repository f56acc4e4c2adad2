"""``import raylake.train.tf`` stays quiet: TensorFlow loads on the first call only."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs tensorflow")
def test_import_starts_no_tensorflow_and_no_logging() -> None:
    out = _python(
        "import logging, sys\n"
        "import raylake.train.tf\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'absl')))\n"
        "print(logging.getLogger().handlers, logging.getLogger('tensorflow').handlers)\n"
    )
    assert out.stdout.splitlines() == ["[]", "[] []"]
    assert out.stderr == ""


def test_missing_tensorflow_names_the_extra() -> None:
    out = _python(
        "import sys; sys.modules['tensorflow'] = None\n"
        "try:\n import raylake.train.tf\nexcept Exception as e:\n print(type(e).__name__, e)\n"
        "import raylake.train\n"
        "try:\n raylake.train.to_tf_dataset\nexcept Exception as e:\n print(type(e).__name__)\n"
    )
    assert out.stdout.splitlines() == [
        "MissingDependencyError tensorflow is required for this feature: pip install 'raylake[tf]'",
        "MissingDependencyError",
    ]
