"""A SparkSession that works with raylake: local Spark, or Spark on Ray through RayDP.

The JVM options below are what Spark 3.5 and RayDP need on Java 17 (docs/dependencies.md):
without them the JVMs RayDP starts die with ``InaccessibleObjectException``.
Nobody should have to know them, so every session made here sets them.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from raylake.arguments import (
    check_count,
    check_flag,
    check_instance,
    check_mapping,
    integer,
    refuse_unknown_keywords,
)
from raylake.errors import EnvironmentSetupError, InvalidArgumentError, MissingDependencyError
from raylake.train.trainer import release_train_controller

logger = logging.getLogger(__name__)

# How long stop() waits for RayDP's Spark master actor to exit (about a second here).
MASTER_EXIT_TIMEOUT_S = 60.0
# The app name of the RayDP session this module started, until stop().
_raydp_app: str | None = None

_OPENED_PACKAGES = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JAVA_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions"]
    + [f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in _OPENED_PACKAGES]
)


def base_configs(configs: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark configs every raylake session gets; the caller's win (options are merged)."""
    merged = {
        "spark.driver.extraJavaOptions": JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
        "spark.ray.raydp_app_master.extraJavaOptions": JAVA_OPTIONS,
        # Executors must run the Python that has raylake, not whatever python3 is on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    for key, value in (configs or {}).items():
        if key.endswith("extraJavaOptions") and key in merged:
            merged[key] = f"{merged[key]} {value}"
        else:
            merged[key] = str(value)
    return merged


def check_java() -> str:
    """The java executable Spark will use, or a clear error that says how to get one."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not candidate or not os.path.exists(candidate):
        raise EnvironmentSetupError(
            "Spark needs a Java runtime (17 recommended) and none was found: install one "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install "
            "openjdk@17) and put java on PATH or set JAVA_HOME"
        )
    return candidate


@refuse_unknown_keywords
def session(
    app_name: str = "raylake",
    *,
    on_ray: bool | None = None,
    master: str | None = None,
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1G",
    configs: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the options raylake and RayDP need.

    ``on_ray=None`` runs Spark on Ray (RayDP) when a Ray cluster is initialized in this
    process, else local Spark; ``True``/``False`` force the choice. Local Spark uses
    ``master`` (default ``local[*, 4]``: all cores, and a failed task is retried up to 4
    times as on a cluster; plain ``local[*]`` never retries).
    """
    on_ray, num_executors, executor_cores, executor_memory = _check_session_args(
        app_name, on_ray, master, num_executors, executor_cores, executor_memory, configs
    )
    check_java()
    # PySpark sends executors the Python of PYSPARK_PYTHON (else "python3" on their PATH):
    # it must be this interpreter, which has raylake and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if on_ray is None:
        on_ray = _ray_running()
    if _ray_running():
        # PySpark replaces the SIGINT handler as its context starts; were it a Ray Train
        # fit()'s, the run's controller would be torn down in the middle of Spark's
        # start-up, which stalled this driver's calls to Ray (raylake/train/trainer.py).
        release_train_controller()
    if on_ray:
        return _raydp_session(app_name, num_executors, executor_cores, executor_memory, configs)
    builder = SparkSession.builder.appName(app_name).master(master or "local[*, 4]")
    for key, value in base_configs(configs).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _check_session_args(
    app_name: Any,
    on_ray: Any,
    master: Any,
    num_executors: Any,
    executor_cores: Any,
    executor_memory: Any,
    configs: Any,
) -> tuple[bool | None, int, int, str | int]:
    """The keywords of :func:`session`, checked before a JVM or a Ray actor starts (a
    string ``on_ray="false"`` ran Spark on Ray, a ``master`` that is no string killed
    the Java gateway, ``configs`` that are no dict raised a bare AttributeError): those
    that change, numpy's numbers as Python ones. RayDP's keywords are checked with local
    Spark too: a mistake in them is one either way."""
    check_instance("app_name", app_name, str, "a string")
    if master is not None:
        check_instance("master", master, str, "a Spark master URL (a string) or None")
    check_mapping("configs", configs)
    memory = executor_memory if isinstance(executor_memory, str) else integer(executor_memory)
    if memory is None or (isinstance(memory, int) and memory < 1):
        raise InvalidArgumentError(
            "executor_memory", executor_memory, "a size ('1G', '512m') or a number of bytes"
        )
    return (
        None if on_ray is None else check_flag("on_ray", on_ray),
        check_count("num_executors", num_executors, 1),
        check_count("executor_cores", executor_cores, 1),
        memory,
    )


def stop() -> None:
    """Stop the active session (and RayDP's Spark cluster, if it runs one).

    With RayDP it returns once RayDP's Spark master actor is gone: RayDP stops it
    asynchronously, and until it exits its name is taken, so a new session of the same
    app name started at once failed with Ray's ``ActorAlreadyExistsError``.
    """
    # Whether RayDP runs a session, not whether raydp is imported: a refused to_ray()
    # imports it, and stop() then left the local session running.
    if _raydp_app is not None or _raydp_runs_spark():
        import raydp

        master = _raydp_master_name()
        raydp.stop_spark()  # a no-op when RayDP runs no Spark
        if master is not None:
            _wait_until_gone(master)
        return
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def _raydp_runs_spark() -> bool:
    """Whether RayDP runs a Spark session this module did not start (raydp.init_spark)."""
    context = sys.modules.get("raydp.context")
    return getattr(context, "_global_spark_context", None) is not None


def _ray_running() -> bool:
    if "ray" not in sys.modules:
        return False
    import ray

    return bool(ray.is_initialized())


def _raydp_session(
    app_name: str,
    num_executors: int,
    executor_cores: int,
    executor_memory: str | int,
    configs: Mapping[str, str] | None,
) -> SparkSession:
    try:
        import ray
        import raydp
    except ImportError as exc:
        raise MissingDependencyError("raydp", "spark") from exc
    if not ray.is_initialized():
        raise EnvironmentSetupError(
            "Spark on Ray (RayDP) needs a running Ray cluster in this process: call "
            "ray.init() first, or pass on_ray=False for local Spark"
        )
    spark = raydp.init_spark(
        app_name,
        num_executors=num_executors,
        executor_cores=executor_cores,
        executor_memory=executor_memory,
        configs=base_configs(configs),
    )
    global _raydp_app
    _raydp_app = app_name
    return spark


def _raydp_master_name() -> str | None:
    """The name of the Ray actor of RayDP's Spark master, if a RayDP session runs."""
    global _raydp_app
    app, _raydp_app = _raydp_app, None
    if not _ray_running():
        return None
    active = SparkSession.getActiveSession()
    if app is None and active is not None:
        app = active.sparkContext.appName
    if app is None:
        return None
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    return app + RAYDP_SPARK_MASTER_SUFFIX


def _wait_until_gone(actor_name: str, timeout: float = MASTER_EXIT_TIMEOUT_S) -> None:
    """Wait until no Ray actor has this name (the check Ray makes before it creates a
    named actor), for at most ``timeout`` seconds."""
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(actor_name)
        except ValueError:
            return
        time.sleep(0.05)
    logger.warning("RayDP's Spark master %r still runs %.0f s after stop", actor_name, timeout)


def check_dataframe(df: Any) -> None:
    """``df`` is a Spark DataFrame, checked before any Spark job (a pandas DataFrame used
    to fail as an AttributeError), and not a streaming one: its rows exist only batch by
    batch, and Spark's AnalysisException about ``writeStream.start()`` came out."""
    if not isinstance(df, DataFrame):
        raise InvalidArgumentError("df", df, "a pyspark.sql.DataFrame")
    if df.isStreaming:
        raise InvalidArgumentError(
            "df",
            df,
            "a batch DataFrame, not a streaming one: pass each micro-batch, e.g. "
            "df.writeStream.foreachBatch(lambda batch, _: raylake.spark.write(batch, uri))",
        )


def check_session(spark: Any) -> None:
    if not isinstance(spark, SparkSession):
        raise InvalidArgumentError("spark", spark, "a pyspark.sql.SparkSession")
