"""Budgets for agent loops: caps on steps, tokens, spend and wall-clock time, and loop detection.

A ``Budget`` is checked as the loop runs (``step``, ``add_usage``, ``check_tool``); the first cap
crossed raises ``BudgetExceeded`` with the reason, and the ``loop.budget`` stage records what was
spent and what stopped it. Used as a context manager it records on exit whatever happened.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

REASONS = ("steps", "tokens", "spend", "wall", "loop")


class BudgetExceeded(RuntimeError):
    """A cap was crossed; ``reason`` is one of steps, tokens, spend, wall, loop."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"agent budget exceeded ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


def _positive(name: str, v: float | None) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
        raise ValueError(f"{name} must be a positive number or None, got {v!r}")


def _usage_tokens(response: object) -> tuple[int, int]:
    """(input, output) tokens of an OpenAI or Anthropic SDK response (or a dict shaped like one)."""
    usage = response.get("usage") if isinstance(response, Mapping) else getattr(response, "usage", None)
    if usage is None:
        return 0, 0

    def g(name: str) -> int:
        v = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0

    if g("prompt_tokens") or g("completion_tokens"):
        return g("prompt_tokens"), g("completion_tokens")
    inp = g("input_tokens") + g("cache_read_input_tokens") + g("cache_creation_input_tokens")
    return inp, g("output_tokens")


class Budget:
    def __init__(
        self,
        *,
        max_steps: int | None = None,
        max_tokens: int | None = None,
        max_spend_usd: float | None = None,
        max_wall_s: float | None = None,
        loop_repeats: int | None = 3,
        parent: rec.PassSpan | None = None,
    ) -> None:
        for name, v in (
            ("max_steps", max_steps),
            ("max_tokens", max_tokens),
            ("max_spend_usd", max_spend_usd),
            ("max_wall_s", max_wall_s),
        ):
            _positive(name, v)
        if loop_repeats is not None and (not isinstance(loop_repeats, int) or loop_repeats < 2):
            raise ValueError(f"loop_repeats must be an int >= 2 or None, got {loop_repeats!r}")
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.max_spend_usd = max_spend_usd
        self.max_wall_s = max_wall_s
        self.loop_repeats = loop_repeats
        self.parent = parent
        self.steps = 0
        self.tokens = 0
        self.spend_usd = 0.0
        self.loop_detected = False
        self.stopped_by = "none"
        self._calls: Counter[str] = Counter()
        self._t0 = time.monotonic()
        self._start_ns = rec.now_ns()
        self._recorded = False

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self._t0

    def _stop(self, reason: str, detail: str) -> None:
        self.stopped_by = reason
        self.record()
        raise BudgetExceeded(reason, detail)

    def check(self) -> None:
        """Raise if any cap is already crossed."""
        if self.max_steps is not None and self.steps > self.max_steps:
            self._stop("steps", f"{self.steps} steps, cap {self.max_steps}")
        if self.max_tokens is not None and self.tokens > self.max_tokens:
            self._stop("tokens", f"{self.tokens} tokens, cap {self.max_tokens}")
        if self.max_spend_usd is not None and self.spend_usd > self.max_spend_usd:
            self._stop("spend", f"${self.spend_usd:.4f} spent, cap ${self.max_spend_usd:.4f}")
        if self.max_wall_s is not None and self.wall_s > self.max_wall_s:
            self._stop("wall", f"{self.wall_s:.1f} s elapsed, cap {self.max_wall_s:.1f} s")

    def step(self, *, tokens: int = 0, spend_usd: float = 0.0) -> None:
        """Count one step of the loop (typically one model pass) and check every cap."""
        self.steps += 1
        self.tokens += int(tokens)
        self.spend_usd += float(spend_usd)
        self.check()

    def add_response(self, response: object, *, spend_usd: float | None = None) -> None:
        """Count one step from an SDK response's usage (and its price, when the price table knows it)."""
        inp, out = _usage_tokens(response)
        if spend_usd is None:
            spend_usd = self._price(response, inp, out)
        self.step(tokens=inp + out, spend_usd=spend_usd or 0.0)

    @staticmethod
    def _price(response: object, inp: int, out: int) -> float:
        from llmtrace.adapters.helpers import meters
        from llmtrace.tracer.record.usage import Usage

        model = response.get("model") if isinstance(response, Mapping) else getattr(response, "model", None)
        cost = meters.pass_cost(str(model) if model else None, Usage(input_tokens=inp, output_tokens=out))
        return cost or 0.0

    def check_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> None:
        """Note a tool call; the same tool with the same arguments ``loop_repeats`` times is a loop."""
        key = f"{name}:{json.dumps(arguments or {}, sort_keys=True, default=str)}"
        self._calls[key] += 1
        if self.loop_repeats is not None and self._calls[key] >= self.loop_repeats:
            self.loop_detected = True
            self._stop("loop", f"{name} called {self._calls[key]} times with the same arguments")
        self.check()

    def values(self) -> dict[str, object]:
        return {
            N.BUDGET_STEPS: self.steps,
            N.BUDGET_MAX_STEPS: self.max_steps,
            N.BUDGET_TOKENS: self.tokens,
            N.BUDGET_SPEND_USD: round(self.spend_usd, 8),
            N.BUDGET_WALL_MS: round(self.wall_s * 1000, 3),
            N.BUDGET_LOOP_DETECTED: self.loop_detected,
            N.BUDGET_STOPPED_BY: self.stopped_by,
            N.BUDGET_MAX_TOKENS: self.max_tokens,
            N.BUDGET_MAX_SPEND_USD: self.max_spend_usd,
            N.BUDGET_MAX_WALL_MS: self.max_wall_s * 1000 if self.max_wall_s is not None else None,
        }

    def record(self) -> None:
        """Emit the ``loop.budget`` stage (once) covering the loop so far."""
        if self._recorded:
            return
        self._recorded = True
        rec.record_stage(
            S.LOOP_BUDGET,
            start_ns=self._start_ns,
            end_ns=rec.now_ns(),
            values=self.values(),
            parent=self.parent,
            status="error" if self.stopped_by != "none" else "ok",
        )

    def __enter__(self) -> Budget:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.record()
