"""Run a Ray Train trainer and let go of its controller when ``fit()`` returns.

Ray Train (2.60) makes a ``TrainController`` actor per ``fit()`` and, in the main
thread, installs a SIGINT handler that holds the controller's handle (so Ctrl-C
aborts the run) and never puts the previous handler back. The controller, and the
actors it owns (the ``DatasetManager`` of ``datasets=``), therefore outlive the run:
they go only when something else replaces the SIGINT handler. PySpark does, when a
``SparkContext`` starts; the controller is then torn down in the middle of Spark's
start-up, and with Spark on Ray (RayDP) that stalled the driver's calls to Ray's
control service, so the next Ray call (a Ray Data read, a ``StreamingJob`` step)
waited without end (docs/training.md, "Ray Train").

``fit(trainer)`` runs ``trainer.fit()``, puts the previous SIGINT handler back and
stops the controller before it returns; ``release_train_controller()`` does the
latter for a ``fit()`` that already ran (``raylake.spark.session`` calls it before
starting Spark).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

from raylake.errors import InvalidArgumentError

logger = logging.getLogger(__name__)

# How long release_train_controller() waits for the controller actor to exit.
CONTROLLER_EXIT_TIMEOUT_S = 30.0
_RAY_TRAIN_MODULE = "ray.train"


def fit(trainer: Any) -> Any:
    """``trainer.fit()`` (any Ray Train trainer), then the run's controller is stopped
    and the SIGINT handler of before is back, so that nothing of the run stays alive
    in the cluster. Returns what ``fit()`` returns; its errors propagate."""
    if not callable(getattr(trainer, "fit", None)):  # Python's AttributeError named no argument
        raise InvalidArgumentError("trainer", trainer, "a Ray Train trainer (with a fit() method)")
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        return trainer.fit()
    finally:
        if main:
            release_train_controller(restore=previous)


def release_train_controller(
    restore: Any = None, timeout: float = CONTROLLER_EXIT_TIMEOUT_S
) -> bool:
    """If the SIGINT handler is one a Ray Train ``fit()`` left behind, put ``restore``
    (default: Python's own ``default_int_handler``) in its place and stop the
    controller it held, waiting up to ``timeout`` seconds for it to exit. True when a
    handler was released. Only the main thread can change signal handlers; elsewhere,
    or when the handler is not Ray Train's, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    if not _is_ray_train_handler(handler):
        return False
    actors = _actor_handles_in(handler)
    if _is_ray_train_handler(restore):  # the handler of an earlier, plain fit()
        actors += _actor_handles_in(restore)
        restore = None
    signal.signal(signal.SIGINT, restore if _settable(restore) else signal.default_int_handler)
    del handler, restore
    for actor in actors:
        _stop(actor, timeout)
    return True


def _is_ray_train_handler(handler: Any) -> bool:
    module = getattr(handler, "__module__", None) or ""
    return callable(handler) and (
        module == _RAY_TRAIN_MODULE or module.startswith(_RAY_TRAIN_MODULE + ".")
    )


def _settable(handler: Any) -> bool:
    return callable(handler) or handler in (signal.SIG_DFL, signal.SIG_IGN)


def _actor_handles_in(handler: Any) -> list[Any]:
    """The Ray actor handles a handler function closes over (Ray Train's: its run's
    controller); found by type, not by Ray's variable names."""
    from ray.actor import ActorHandle

    cells = getattr(handler, "__closure__", None) or ()
    found = []
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, ActorHandle):
            found.append(value)
    return found


def _stop(actor: Any, timeout: float) -> None:
    """Kill the actor and wait until Ray reports it dead (its owned actors go with it)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    if not ray.is_initialized():
        return
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=min(left, 1.0))
        except RayActorError:
            return
        except GetTimeoutError:
            continue
        time.sleep(0.05)  # the kill has not landed yet
    logger.warning("Ray Train's controller actor still runs %.0f s after it was killed", timeout)
