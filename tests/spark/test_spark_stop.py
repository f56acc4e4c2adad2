"""raylake.spark.stop() stops the session raylake runs: RayDP's, or the local one."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

import raylake.spark as rs

spark_session = sys.modules["raylake.spark.session"]

pytestmark = pytest.mark.spark


class _Session:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_stop_stops_a_local_session_once_raydp_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused to_ray() imports raydp; the local session must still be stopped."""
    calls: list[str] = []
    raydp = types.ModuleType("raydp")
    raydp.stop_spark = lambda: calls.append("stop_spark")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "raydp", raydp)
    monkeypatch.setitem(sys.modules, "raydp.context", types.ModuleType("raydp.context"))
    monkeypatch.setattr(spark_session, "_raydp_app", None)
    local = _Session()
    monkeypatch.setattr(spark_session.SparkSession, "getActiveSession", lambda: local)
    rs.stop()
    assert local.stopped and calls == []


def test_stop_stops_the_raydp_session_raylake_started(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    raydp = types.ModuleType("raydp")
    raydp.stop_spark = lambda: calls.append("stop_spark")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "raydp", raydp)
    monkeypatch.setattr(spark_session, "_raydp_app", "etl")
    monkeypatch.setattr(spark_session, "_raydp_master_name", lambda: None)
    active: Any = _Session()
    monkeypatch.setattr(spark_session.SparkSession, "getActiveSession", lambda: active)
    rs.stop()
    assert calls == ["stop_spark"] and not active.stopped
