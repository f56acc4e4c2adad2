"""The read-ahead threads a test started and left alive.

Other tests (a docs block that abandons an iterator, say) may leave a thread until the
garbage collector closes their generator; a test checks only the threads it started.
"""

from __future__ import annotations

import threading

NAMES = ("raylake-prefetch", "raylake-read-ahead", "raylake-convert")
_before: set[threading.Thread] = set()


def remember_threads() -> None:
    """Take the threads alive now as the baseline (the autouse fixture calls this)."""
    _before.clear()
    _before.update(threading.enumerate())


def raylake_threads() -> list[str]:
    """Read-ahead threads alive now that were not alive when the test began.

    Other raylake pools (the manifests', say) are long-lived and not counted.
    """
    return [t.name for t in threading.enumerate() if t.name.startswith(NAMES) and t not in _before]
