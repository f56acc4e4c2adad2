"""Secrets in the Ray object store, referenced (never copied) by pickled options.

Where Ray is initialized in a process that pickles :class:`StorageOptions` (the
driver, typically), the secrets are put into the object store once per Ray session
and the pickle carries the ``ObjectRef``: its id and its owner's address, which say
nothing about the secrets. A Ray worker on any node resolves it lazily with
``ray.get`` the first time it opens the store, and keeps the result in its registry.
The driver's registry holds the reference, so the object lives as long as the driver.

The ``ObjectRef`` travels as bytes pickled by Ray's own pickler (which records the
owner and registers the reference with the object being serialized), so that
unpickling options never imports Ray: a Spark executor or a spawned DataLoader worker
carries the bytes and never touches them.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from raylake.io import credentials

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 60.0


def ray_ready() -> bool:
    """Whether Ray is initialized in this process (a driver after ``ray.init``, a worker)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def _session() -> str:
    import ray

    ctx = ray.get_runtime_context()
    return f"{ctx.get_node_id()}/{ctx.get_job_id()}"


def share(fingerprint: str) -> bytes | None:
    """A pickled reference to the secrets in the object store, putting them there on first
    use in this Ray session; None where Ray is not initialized or they are unknown here."""
    if not ray_ready():
        return None
    import ray

    try:
        session = _session()
        ref = credentials.shared_ref(fingerprint, session)
        if ref is None:
            secret = credentials.recall(fingerprint)
            if secret is None:
                return None
            ref = _put(secret)
            credentials.set_shared_ref(fingerprint, secret, ref, session)
        return bytes(ray.cloudpickle.dumps(ref))
    except Exception as exc:  # pickling must not fail for it; workers then say what is missing
        logger.warning("could not share credentials through the Ray object store: %r", exc)
        return None


def _put(secret: dict[str, Any]) -> Any:
    """``ray.put`` on a helper thread: this runs inside ``__getstate__``, possibly while Ray
    serializes task arguments on this thread, and a nested ``ray.put`` would reset that
    serialization's thread-local state (the references the outer object contains)."""
    import ray

    result: list[Any] = []
    errors: list[BaseException] = []

    def put() -> None:
        try:
            result.append(ray.put(secret))
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    thread = threading.Thread(target=put, name="raylake-share-credentials")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def fetch(fingerprint: str, shared: bytes) -> tuple[dict[str, Any] | None, str]:
    """The secrets behind a shared reference, registered in this process; or (None, why)."""
    if not ray_ready():
        return None, (
            "the secrets given on the driver are in the Ray object store, and Ray is not "
            "initialized in this process"
        )
    import ray

    try:
        ref = ray.cloudpickle.loads(shared)
        secret = ray.get(ref, timeout=FETCH_TIMEOUT_S)
    except Exception as exc:  # the message of a Ray error never holds the object's value
        return None, (
            "the secrets given on the driver could not be fetched from the Ray object store "
            f"({type(exc).__name__}: the driver that holds them may have exited or belong "
            "to another Ray session)"
        )
    if not isinstance(secret, dict) or credentials.fingerprint_of(secret) != fingerprint:
        return None, "the object store returned secrets that do not match their fingerprint"
    credentials.set_shared_ref(fingerprint, secret, ref, _session())
    logger.debug("fetched credentials %s from the Ray object store", fingerprint)
    return secret, ""
