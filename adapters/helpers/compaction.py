"""Compaction: replace old turns with a summary, and say what the summary dropped.

``compact`` does it with the app's own ``summarize`` function; ``record_compaction`` only records a
compaction the app did its own way. Both emit ``loop.compaction`` with tokens before and after, turns
summarised, pinned items, and the names and numbers that were in the context before but not after —
the details a long session later "forgets".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading.facts import facts, stored_labels
from llmtrace.tracer.reading.segments import part_text
from llmtrace.tracer.reading.tokens import approx_tokens as approx_chars
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

Message = Mapping[str, Any]


def approx_tokens(text: str) -> int:
    return approx_chars(len(text))


def message_text(m: Message) -> str:
    return part_text(m.get("content"))


@dataclass(frozen=True, slots=True)
class CompactionResult:
    messages: list[dict[str, Any]]
    compacted: bool
    tokens_before: int
    tokens_after: int
    turns_summarized: int
    pinned: int
    facts_lost: tuple[str, ...]


def record_compaction(
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    trigger_tokens: int | None = None,
    turns_summarized: int = 0,
    pinned: int = 0,
    count_tokens: Callable[[str], int] = approx_tokens,
    parent: rec.PassSpan | None = None,
) -> CompactionResult:
    """Record a compaction done elsewhere: compares the facts in ``before`` and ``after``."""
    text_before = _joined(before)
    return _compacted(
        text_before,
        count_tokens(text_before),
        after,
        turns_summarized=turns_summarized,
        pinned=pinned,
        count_tokens=count_tokens,
        trigger_tokens=trigger_tokens,
        parent=parent,
    )


def _joined(messages: Sequence[Message]) -> str:
    return "\n".join(message_text(m) for m in messages)


def _compacted(
    text_before: str,
    tokens_before: int,
    after: Sequence[Message],
    *,
    turns_summarized: int,
    pinned: int,
    count_tokens: Callable[[str], int],
    trigger_tokens: int | None,
    parent: rec.PassSpan | None,
) -> CompactionResult:
    """The result of a compaction that happened (the facts lost between the two texts), recorded."""
    text_after = _joined(after)
    lost = tuple(sorted(facts(text_before) - facts(text_after)))
    r = CompactionResult(
        [dict(m) for m in after],
        True,
        tokens_before,
        count_tokens(text_after),
        turns_summarized,
        pinned,
        lost,
    )
    _emit(r, trigger_tokens, parent)
    return r


def _unchanged(
    msgs: Sequence[Message], tokens: int, pinned: int, trigger_tokens: int, parent: rec.PassSpan | None
) -> CompactionResult:
    """The result when nothing was compacted (below the trigger, or nothing old enough to summarise)."""
    r = CompactionResult([dict(m) for m in msgs], False, tokens, tokens, 0, pinned, ())
    _emit(r, trigger_tokens, parent)
    return r


def _emit(r: CompactionResult, trigger_tokens: int | None, parent: rec.PassSpan | None) -> None:
    with rec.stage(
        S.LOOP_COMPACTION,
        {
            N.COMPACTION_TRIGGER_TOKENS: trigger_tokens,
            N.COMPACTION_TOKENS_BEFORE: r.tokens_before,
            N.COMPACTION_TOKENS_AFTER: r.tokens_after,
            N.COMPACTION_TURNS_SUMMARIZED: r.turns_summarized,
            N.COMPACTION_PINNED: r.pinned,
            N.COMPACTION_FACTS_LOST: stored_labels(r.facts_lost[:200]),
            N.COMPACTION_FACTS_LOST_COUNT: len(r.facts_lost),
            N.COMPACTION_COMPACTED: r.compacted,
        },
        parent=parent,
    ):
        pass


def compact(
    messages: Sequence[Message],
    summarize: Callable[[list[Message]], str],
    *,
    trigger_tokens: int,
    keep_last: int = 4,
    pinned: Callable[[Message], bool] | None = None,
    count_tokens: Callable[[str], int] = approx_tokens,
    parent: rec.PassSpan | None = None,
) -> CompactionResult:
    """Summarise older turns once the context passes ``trigger_tokens``.

    System messages and messages for which ``pinned(m)`` is true stay verbatim; the last ``keep_last``
    messages stay; the rest become one summary message from ``summarize(turns)``.
    """
    if trigger_tokens <= 0:
        raise ValueError("trigger_tokens must be positive")
    if keep_last < 0:
        raise ValueError("keep_last must be >= 0")
    msgs = list(messages)
    text_before = _joined(msgs)
    before_tokens = count_tokens(text_before)
    if before_tokens <= trigger_tokens:
        return _unchanged(msgs, before_tokens, 0, trigger_tokens, parent)
    split = max(len(msgs) - keep_last, 0)
    head, tail = msgs[:split], msgs[split:]
    kept_head: list[Message] = []
    to_summarize: list[Message] = []
    n_pinned = 0
    for m in head:
        if m.get("role") == "system":
            kept_head.append(m)
        elif pinned is not None and pinned(m):
            kept_head.append(m)
            n_pinned += 1
        else:
            to_summarize.append(m)
    if not to_summarize:
        return _unchanged(msgs, before_tokens, n_pinned, trigger_tokens, parent)
    summary = summarize(to_summarize)
    summary_msg = {"role": "user", "content": f"Summary of the earlier conversation:\n{summary}"}
    after = [*kept_head, summary_msg, *tail]
    return _compacted(
        text_before,
        before_tokens,
        after,
        turns_summarized=len(to_summarize),
        pinned=n_pinned,
        count_tokens=count_tokens,
        trigger_tokens=trigger_tokens,
        parent=parent,
    )
