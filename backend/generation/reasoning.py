"""Reasoning budget: count the tokens a model spends inside its thinking delimiters and cut it off.

Thinking starts when the open delimiter appears in the output (or the prompt already ends with it, as
templates that pre-open the block do); it ends at the close delimiter. When the count reaches the budget
before the model closes, the close delimiter's tokens are forced one per step.
"""

from __future__ import annotations

from collections.abc import Callable

from llmtrace.backend.generation.params import ReasoningConfig


class ReasoningTracker:
    __slots__ = ("config", "_close_ids", "_token_bytes", "_tail", "phase", "reasoning_tokens", "forced_close",
                 "_forced_queue")

    def __init__(
        self,
        config: ReasoningConfig,
        *,
        encode: Callable[[str], list[int]],
        token_bytes: Callable[[int], bytes],
        prompt_tail: bytes = b"",
    ) -> None:
        if config.budget < 0:
            raise ValueError(f"reasoning budget must be >= 0, got {config.budget}")
        if not config.open_delimiter or not config.close_delimiter:
            raise ValueError("reasoning delimiters must be non-empty")
        self.config = config
        self._close_ids = encode(config.close_delimiter)
        self._token_bytes = token_bytes
        self._tail = b""  # recent raw output bytes, enough to see a delimiter straddle tokens
        opened = prompt_tail.rstrip().endswith(config.open_delimiter.encode("utf-8"))
        self.phase = "thinking" if opened else "before"  # before -> thinking -> done
        self.reasoning_tokens = 0
        self.forced_close = False
        self._forced_queue: list[int] = []

    def forced_token(self) -> int | None:
        """The token the budget forces next, if any."""
        if self.phase == "thinking" and not self._forced_queue and self.reasoning_tokens >= self.config.budget:
            self._forced_queue = list(self._close_ids)
            self.forced_close = True
        return self._forced_queue[0] if self._forced_queue else None

    def peek_forced(self, extra_tokens: int) -> int | None:
        """For speculative positions: the forced token ``extra_tokens`` ahead (only within a forced run)."""
        if self._forced_queue and extra_tokens < len(self._forced_queue):
            return self._forced_queue[extra_tokens]
        return None

    def commit(self, token_id: int) -> None:
        if self._forced_queue and self._forced_queue[0] == token_id:
            self._forced_queue.pop(0)
        if self.phase == "thinking":
            self.reasoning_tokens += 1
        self._tail = (self._tail + self._token_bytes(token_id))[-256:]
        if self.phase == "before" and self.config.open_delimiter.encode("utf-8") in self._tail:
            self.phase = "thinking"
            self._tail = self._tail[self._tail.index(self.config.open_delimiter.encode("utf-8")) + 1:]
        if self.phase == "thinking" and self.config.close_delimiter.encode("utf-8") in self._tail:
            self.phase = "done"
            self._forced_queue.clear()
