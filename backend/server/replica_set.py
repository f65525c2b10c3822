"""Replica selection: prefix-aware (the replica holding the longest cached prefix of this prompt, unless it
is much busier than the least-loaded one) or round-robin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmtrace.backend.server.replica import Replica

Policy = Literal["prefix_aware", "round_robin"]


@dataclass(frozen=True, slots=True)
class Selection:
    replica: Replica
    policy: str  # prefix_aware, round_robin or least_loaded (what actually decided)
    candidates: int
    expected_hit_tokens: int


class ReplicaSet:
    def __init__(self, replicas: list[Replica], policy: Policy = "prefix_aware", load_slack: int = 4) -> None:
        if not replicas:
            raise ValueError("at least one replica is needed")
        if policy not in ("prefix_aware", "round_robin"):
            raise ValueError(f"routing policy must be prefix_aware or round_robin, got {policy!r}")
        self.replicas = replicas
        self.policy = policy
        # A prefix hit is worth a few extra requests of queueing, not an unbounded pile-up on one replica.
        self.load_slack = load_slack
        self._next = 0

    def __iter__(self):
        return iter(self.replicas)

    def __len__(self) -> int:
        return len(self.replicas)

    def select(self, token_ids: list[int]) -> Selection:
        n = len(self.replicas)
        if self.policy == "round_robin":
            r = self.replicas[self._next % n]
            self._next += 1
            return Selection(r, "round_robin", n, r.cached_prefix(token_ids))
        least = min(self.replicas, key=lambda r: (r.in_flight, r.served_total))
        hits = [(r.cached_prefix(token_ids), r) for r in self.replicas]
        best_hit = max(h for h, _ in hits)
        if best_hit > 0:
            holders = [r for h, r in hits if h == best_hit and r.in_flight <= least.in_flight + self.load_slack]
            if holders:
                chosen = min(holders, key=lambda r: r.in_flight)
                return Selection(chosen, "prefix_aware", n, best_hit)
        return Selection(least, "least_loaded", n, dict((id(r), h) for h, r in hits)[id(least)])
