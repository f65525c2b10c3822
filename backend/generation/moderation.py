"""Streaming moderation on the server: a word list checked every N generated tokens, as a moderation
hook that runs beside the generator does. Because the check runs only every ``every_tokens`` tokens, text is
streamed before the verdict; when a check objects, the sequence ends with ``content_filter`` and what the
client already showed is "retracted" (the symptom "text shown, then a refusal").

``llmtrace serve --moderation-words W1,W2 [--moderation-every-tokens N]`` turns it on for the whole server;
a request's ``moderation`` field (``false`` to skip it, or ``{"words": [...], "every_tokens": N}``) overrides
it. Records ``safety.moderation`` (checks, lag in tokens, aborted, characters shown and retracted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtrace.tracer.registry import names as N


@dataclass(frozen=True, slots=True)
class ModerationPolicy:
    words: tuple[str, ...]
    every_tokens: int = 8

    def __post_init__(self) -> None:
        if not self.words or any(not w.strip() for w in self.words):
            raise ValueError("moderation words must be non-empty")
        if not 1 <= self.every_tokens <= 4096:
            raise ValueError(f"moderation every_tokens must be in 1..4096, got {self.every_tokens}")


_server_policy: ModerationPolicy | None = None  # llmtrace serve --moderation-words


def configure(policy: ModerationPolicy | None) -> None:
    global _server_policy
    _server_policy = policy


def server_policy() -> ModerationPolicy | None:
    return _server_policy


class StreamingModeration:
    """One sequence's moderation: counts tokens, checks the text so far every ``every_tokens`` tokens and
    once more at the end, and remembers what the verdict came too late for."""

    __slots__ = ("policy", "_pattern", "_overlap", "_scanned", "checks", "since_check", "aborted", "lag_tokens",
                 "shown_chars", "retracted_chars")

    def __init__(self, policy: ModerationPolicy) -> None:
        self.policy = policy
        self._pattern = re.compile("|".join(rf"\b{re.escape(w.strip())}\b" for w in policy.words), re.IGNORECASE)
        # a check scans only what the last one had not seen, from a word's length before it (a word may
        # straddle the two): each check was a scan of the whole answer so far
        self._overlap = max(len(w.strip()) for w in policy.words)
        self._scanned = 0
        self.checks = 0
        self.since_check = 0  # tokens generated since the last passing check
        self.aborted = False
        self.lag_tokens = 0
        self.shown_chars = 0
        self.retracted_chars = 0

    def after_token(self, shown_chars: int) -> bool:
        """A token was committed and its text emitted (``shown_chars`` characters so far): True when this
        step's check is due, every ``every_tokens`` tokens. The caller then builds the text and calls
        ``check``: only on the steps that check, not on every token (a copy of the whole answer each)."""
        self.since_check += 1
        self.shown_chars = shown_chars
        return self.since_check >= self.policy.every_tokens

    def at_end(self, shown_chars: int) -> bool:
        """The sequence ended on its own: True when a last ``check`` must cover the tokens the periodic one
        did not."""
        self.shown_chars = shown_chars
        return self.since_check > 0

    def check(self, text: str) -> bool:
        """Check the text so far: True (and the stream is to be cut) when it holds a listed word."""
        self.checks += 1
        # search(text, pos) still reads the character before pos for \b: "prefund" is no "refund" at any pos
        start, self._scanned = max(0, self._scanned - self._overlap), len(text)
        if self._pattern.search(text, start):
            self.aborted = True
            self.lag_tokens = self.since_check
            self.retracted_chars = len(text)  # all of it was shown before the verdict
            return True
        self.since_check = 0
        return False

    def values(self) -> dict[str, object]:
        return {
            N.MODERATION_CHECKS: self.checks,
            N.MODERATION_LAG_TOKENS: self.lag_tokens if self.aborted else self.since_check,
            N.MODERATION_ABORTED: self.aborted,
            N.MODERATION_RETRACTED_CHARS: self.retracted_chars,
            N.MODERATION_SHOWN_CHARS: self.shown_chars,
        }


def resolve(field: object) -> ModerationPolicy | None:
    """The policy a request gets: its ``moderation`` field, else the server's. Raises ValueError on a
    malformed field (the protocol layer turns it into a 400)."""
    if field is None or field is True:
        return _server_policy
    if field is False:
        return None
    if isinstance(field, dict):
        words = field.get("words")
        every = field.get("every_tokens", _server_policy.every_tokens if _server_policy else 8)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError("'moderation.words' must be a list of strings")
        if not isinstance(every, int) or isinstance(every, bool):
            raise ValueError("'moderation.every_tokens' must be an integer")
        return ModerationPolicy(tuple(words), every)
    raise ValueError("'moderation' must be a boolean or an object with 'words'")


def parse_words(spec: str) -> tuple[str, ...]:
    """``--moderation-words``: comma-separated words (or a @FILE with one a line)."""
    if spec.startswith("@"):
        with open(spec[1:], encoding="utf-8") as fh:
            items = [line.strip() for line in fh]
    else:
        items = [w.strip() for w in spec.split(",")]
    return tuple(w for w in items if w and not w.startswith("#"))
