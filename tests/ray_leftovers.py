"""What a test left running on the session's Ray cluster (tests/conftest.py checks it).

A test that leaves an actor, a placement group or a CPU reservation behind makes a later
test wait: the README's 4-shard StreamingJob once waited without end after the Ray Train
tests (their controller actor outlived fit(); raylake/train/trainer.py). The check names
the test that leaked, not the one that hangs.

Things end asynchronously in Ray (a killed actor, a finished Ray Data task's CPU), so
``leftovers`` polls until the cluster is back where it was before the test, or until a
generous deadline: no timing luck either way.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

# How long a test's leftovers may take to go after it ends before the test fails.
DEADLINE_S = 60.0
# Ray's own actors made once per cluster, living as long as it (Ray Data's statistics and
# autoscaling coordinators).
RAY_SYSTEM_ACTORS = frozenset({"_StatsActor", "_AutoscalingCoordinatorActor"})
_LIVE_ACTOR_STATES = ("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING")


@dataclass(frozen=True)
class Snapshot:
    """The session cluster's actors, placement groups and free CPUs at one moment."""

    actors: dict[str, dict[str, Any]]
    placement_groups: dict[str, dict[str, Any]]
    free_cpus: float
    total_cpus: float


def ray_running() -> bool:
    if "ray" not in sys.modules:
        return False
    import ray

    return bool(ray.is_initialized())


def snapshot() -> Snapshot:
    import ray
    from ray._private import state  # no dashboard here, so not ray.util.state

    actors = {
        actor_id: info
        for name in _LIVE_ACTOR_STATES
        for actor_id, info in state.actors(actor_state_name=name).items()
        if info["ActorClassName"] not in RAY_SYSTEM_ACTORS
    }
    groups = {
        group_id: info
        for group_id, info in ray.util.placement_group_table().items()
        if info["state"] != "REMOVED"
    }
    return Snapshot(
        actors,
        groups,
        float(ray.available_resources().get("CPU", 0.0)),
        float(ray.cluster_resources().get("CPU", 0.0)),
    )


def leftovers(before: Snapshot | None, deadline_s: float = DEADLINE_S) -> str | None:
    """None once the cluster is back where ``before`` found it (no new actor or placement
    group, as many free CPUs; all of them when Ray started during the test), else, at
    the deadline, what is still there."""
    deadline = time.monotonic() + deadline_s
    while True:
        now = snapshot()
        actors = {k: v for k, v in now.actors.items() if before is None or k not in before.actors}
        groups = {
            k: v
            for k, v in now.placement_groups.items()
            if before is None or k not in before.placement_groups
        }
        free = now.total_cpus if before is None else min(before.free_cpus, now.total_cpus)
        if not actors and not groups and now.free_cpus >= free - 1e-9:
            return None
        if time.monotonic() >= deadline:
            return _describe(actors, groups, now, free, deadline_s)
        time.sleep(0.1)


def _describe(
    actors: dict[str, dict[str, Any]],
    groups: dict[str, dict[str, Any]],
    now: Snapshot,
    free: float,
    deadline_s: float,
) -> str:
    lines = [f"the test left this on the Ray cluster {deadline_s:.0f} s after it ended:"]
    lines += [
        f"  actor {info['ActorClassName']} {info['Name'] or '(unnamed)'} "
        f"{info['State']} pid={info['Pid']} id={actor_id}"
        for actor_id, info in actors.items()
    ]
    lines += [
        f"  placement group {info['name'] or '(unnamed)'} {info['state']} "
        f"bundles={info['bundles']} id={group_id}"
        for group_id, info in groups.items()
    ]
    if now.free_cpus < free - 1e-9:
        lines.append(f"  CPUs: {now.free_cpus:g} of {now.total_cpus:g} free, {free:g} before")
    return "\n".join(lines)
