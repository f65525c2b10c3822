"""Streaming moderation: check the text as it streams, cut the stream when the check objects.

The guard runs every ``every_chars`` new characters, so it always lags the generator; what the user
already saw when the verdict came is what gets retracted. ``safety.moderation`` records the number of
checks, that lag (chunks shown since the last passing check), whether the stream was cut, and the
characters retracted. Cutting closes the SDK stream, so the client pass is recorded as cancelled.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class ModerationAborted(RuntimeError):
    def __init__(self, retracted_chars: int) -> None:
        super().__init__(f"stream cut by moderation after {retracted_chars} characters were shown")
        self.retracted_chars = retracted_chars


def text_of(item: object) -> str:
    """Text of a stream item: a str, an OpenAI chunk, an Anthropic text delta event, or dicts like them."""
    if isinstance(item, str):
        return item

    def g(obj: object, name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    choices = g(item, "choices")
    if choices:
        delta = g(choices[0], "delta")
        content = g(delta, "content") if delta is not None else g(choices[0], "text")
        return content if isinstance(content, str) else ""
    delta = g(item, "delta")
    if delta is not None:
        text = g(delta, "text")
        return text if isinstance(text, str) else ""
    return ""


class StreamModerator:
    """Wrap a stream with ``wrap`` (or ``awrap``); ``check(text_so_far)`` returns True to cut it."""

    def __init__(
        self,
        check: Callable[[str], Any],
        *,
        every_chars: int = 200,
        extract: Callable[[object], str] = text_of,
        raise_on_abort: bool = False,
        parent: rec.PassSpan | None = None,
    ) -> None:
        if every_chars < 1:
            raise ValueError("every_chars must be >= 1")
        self.check = check
        self.every_chars = every_chars
        self.extract = extract
        self.raise_on_abort = raise_on_abort
        self.parent = parent
        self.checks = 0
        self.aborted = False
        self.shown_chars = 0
        self.retracted_chars = 0
        self.lag_chunks = 0
        self._parts: list[str] = []
        self._since_check = 0
        self._fed_since_pass = 0
        self._start_ns = 0

    def _feed(self, item: object) -> str:
        text = self.extract(item)
        if text:
            self._parts.append(text)
            self._since_check += len(text)
            self._fed_since_pass += 1
        return text

    def _verdict(self, flagged: Any, *, last_shown: bool) -> bool:
        self.checks += 1
        if flagged:
            self.aborted = True
            self.retracted_chars = self.shown_chars
            # Chunks the user saw that no passing check had covered: how far the guard lagged the stream.
            self.lag_chunks = self._fed_since_pass - (0 if last_shown else 1)
            return True
        self._since_check = 0
        self._fed_since_pass = 0
        return False

    def _record(self) -> None:
        rec.record_stage(
            S.SAFETY_MODERATION,
            start_ns=self._start_ns,
            end_ns=rec.now_ns(),
            parent=self.parent,
            values={
                N.MODERATION_CHECKS: self.checks,
                N.MODERATION_LAG_TOKENS: self.lag_chunks,
                N.MODERATION_ABORTED: self.aborted,
                N.MODERATION_RETRACTED_CHARS: self.retracted_chars,
                N.MODERATION_SHOWN_CHARS: self.shown_chars,
            },
        )

    @staticmethod
    def _close(stream: object) -> None:
        close = getattr(stream, "close", None)
        if callable(close):
            close()

    def wrap(self, stream: Iterable[Any]) -> Iterator[Any]:
        self._start_ns = rec.now_ns()
        try:
            for item in stream:
                text = self._feed(item)
                if self._since_check >= self.every_chars and self._verdict(
                    self.check("".join(self._parts)), last_shown=False
                ):
                    self._close(stream)
                    break
                self.shown_chars += len(text)
                yield item
            else:
                if self._since_check:  # the final words were already shown: all of it is retracted if flagged
                    self._verdict(self.check("".join(self._parts)), last_shown=True)
        finally:
            self._record()
        if self.aborted and self.raise_on_abort:
            raise ModerationAborted(self.retracted_chars)

    async def awrap(self, stream: AsyncIterable[Any]) -> AsyncIterator[Any]:
        self._start_ns = rec.now_ns()

        async def verdict(last_shown: bool) -> bool:
            flagged = self.check("".join(self._parts))
            if inspect.isawaitable(flagged):
                flagged = await flagged
            return self._verdict(flagged, last_shown=last_shown)

        try:
            async for item in stream:
                text = self._feed(item)
                if self._since_check >= self.every_chars and await verdict(False):
                    close = getattr(stream, "close", None) or getattr(stream, "aclose", None)
                    if callable(close):
                        res = close()
                        if inspect.isawaitable(res):
                            await res
                    break
                self.shown_chars += len(text)
                yield item
            else:
                if self._since_check:
                    await verdict(True)
        finally:
            self._record()
        if self.aborted and self.raise_on_abort:
            raise ModerationAborted(self.retracted_chars)
