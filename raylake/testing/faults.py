"""Seeded fault plans for the test object store and the local fault filesystem.

A :class:`FaultPlan` says which requests fail and how: a list of rules, each matching
an operation (an HTTP method for the S3 server, ``read``/``write``/``create``/
``rename``/``list`` for the local filesystem) and a path pattern, with a rate, a
number of matching requests to let through first and a cap on how many it faults.
Which matching request fails is drawn from a random stream seeded by the plan, so a
run is reproducible from its seed and no test depends on timing luck.

Fault kinds (what the caller sees):

- ``slowdown`` / ``internal``: S3 answers 503 SlowDown / 500 InternalError; the
  request is not carried out. On local files: ``eio`` raises ``OSError(EIO)``,
  ``enospc`` raises ``OSError(ENOSPC)`` (a write leaves half a file behind first).
- ``reset``: the connection drops before the request is carried out.
- ``slow``: the request waits ``delay_s`` first, then is served.
- ``lost``: the request is carried out, then answered 500 (on local files:
  carried out, then ``OSError(EIO)``): the caller cannot know it succeeded.
- ``lost_reset``: carried out, then the connection drops without an answer.
- ``truncated``: served, but the connection drops after half the answer's body (the
  headers announce all of it): a read cut short (S3 server only).
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FaultKind = Literal[
    "slowdown", "internal", "reset", "slow", "lost", "lost_reset", "truncated", "eio", "enospc"
]  # fmt: skip
FAULT_KINDS: tuple[str, ...] = (
    "slowdown", "internal", "reset", "slow", "lost", "lost_reset", "truncated", "eio", "enospc",
)  # fmt: skip
# Kinds that carry the request out before failing its answer.
APPLIED_KINDS = frozenset({"slow", "lost", "lost_reset"})


@dataclass(frozen=True)
class FaultRule:
    """Fault ``rate`` of the requests matching ``operation`` and ``path`` (a regex
    searched in the request's path), after letting ``after`` of them through, at most
    ``times`` faults (None: no cap). ``conditional=True`` matches only conditional
    creates (S3's ``If-None-Match: *``; the local ``create``). ``once_fired=i`` arms
    the rule only once rule ``i`` of the plan has fired (reads that fail after a
    create, say)."""

    kind: FaultKind
    rate: float = 1.0
    operation: str | None = None
    path: str | None = None
    conditional: bool | None = None
    after: int = 0
    times: int | None = None
    delay_s: float = 0.05
    once_fired: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1], got {self.rate}")

    def matches(self, operation: str, path: str, conditional: bool) -> bool:
        if self.operation is not None and self.operation.upper() != operation.upper():
            return False
        if self.conditional is not None and self.conditional != conditional:
            return False
        return self.path is None or re.search(self.path, path) is not None


@dataclass(frozen=True)
class FaultPlan:
    """Rules tried in order; the first that fires decides the request's fault."""

    rules: tuple[FaultRule, ...] = ()
    seed: int = 0

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "rules": [asdict(r) for r in self.rules]})

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> FaultPlan:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        rules = tuple(FaultRule(**rule) for rule in data.get("rules", ()))
        return cls(rules=rules, seed=int(data.get("seed", 0)))

    @classmethod
    def transient(
        cls, rate: float, *, seed: int = 0, lost_creates: float = 0.0, local: bool = False
    ) -> FaultPlan:
        """``rate`` of all requests faulted, spread over the transient kinds; and
        ``lost_creates`` of the conditional creates of snapshot files carried out and
        then answered with an error (the commit point's unknown outcome)."""
        rules: list[FaultRule] = []
        if lost_creates:
            rules.append(
                FaultRule("lost", lost_creates, path=r"snapshot/snapshot-\d+\.json$",
                          conditional=True)
            )  # fmt: skip
        kinds: Sequence[FaultKind] = (
            ("eio", "eio", "lost") if local
            else ("slowdown", "internal", "reset", "slow", "lost", "lost_reset")
        )  # fmt: skip
        rules += [FaultRule(kind, rate / len(kinds)) for kind in kinds]
        return cls(rules=tuple(rules), seed=seed)


@dataclass
class FaultInjector:
    """The state of a plan being applied: which requests matched, what was injected."""

    plan: FaultPlan
    injected: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    _matched: list[int] = field(default_factory=list)
    _fired: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.plan.seed)
        self._matched = [0] * len(self.plan.rules)
        self._fired = [0] * len(self.plan.rules)

    def decide(self, operation: str, path: str, conditional: bool = False) -> FaultRule | None:
        """The rule whose fault this request gets, or None."""
        with self._lock:
            self.requests += 1
            for index, rule in enumerate(self.plan.rules):
                if not rule.matches(operation, path, conditional):
                    continue
                if rule.once_fired is not None and not self._fired[rule.once_fired]:
                    continue
                self._matched[index] += 1
                if self._matched[index] <= rule.after:
                    continue
                if rule.times is not None and self._fired[index] >= rule.times:
                    continue
                if rule.rate < 1.0 and self._rng.random() >= rule.rate:
                    continue
                self._fired[index] += 1
                self.injected[rule.kind] += 1
                return rule
            return None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "injected": dict(self.injected)}
