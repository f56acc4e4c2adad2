"""The check that a Ray-using test leaves nothing behind (tests/ray_leftovers.py) sees
what a test would leave: an actor, a placement group, CPUs in use."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from ray_leftovers import leftovers, snapshot

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
# Workers cannot import this test module: ship its actor class by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Holder:
    def ready(self) -> bool:
        return True


def test_leftovers_are_named_until_they_go(ray_cluster: Any) -> None:
    before = snapshot()
    actor = ray.remote(num_cpus=1)(Holder).remote()
    ray.get(actor.ready.remote())
    group = ray.util.placement_group([{"CPU": 0.5}])
    ray.get(group.ready())
    left = leftovers(before, deadline_s=0.5)
    assert left is not None
    assert "actor Holder" in left and "placement group" in left and "CPUs: 0.5 of 2" in left
    ray.kill(actor, no_restart=True)
    ray.util.remove_placement_group(group)
    assert leftovers(before) is None  # they go, in Ray's own time
