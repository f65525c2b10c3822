"""Prompt segments (system, tools, each history turn, user) and what capture mode lets the store keep.

With ``hashes`` each segment becomes a hash plus a hash chain over fixed-size chunks, so the divergence
finder can say in which segment, and at which chunk, two requests' prompts part. With ``full`` the
scrubbed text is kept as well. With ``none`` nothing of the prompt is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from llmtrace.tracer import capture
from llmtrace.tracer.reading.prompt_segments import (
    CHUNK_CHARS,
    canonical,
    prompt_attributes,
    rendered,
    segment_records,
)
from llmtrace.tracer.registry import names as N

__all__ = ["CHUNK_CHARS", "canonical", "capture_attributes", "part_text", "rendered", "segment_records",
           "turn_segments"]


def part_text(content: object) -> str:
    """Text of a message's content: a string, or a list of parts (text parts joined; others as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                kind = part.get("type")
                if kind == "text" and isinstance(part.get("text"), str):
                    pieces.append(part["text"])
                elif kind == "tool_result":
                    pieces.append(part_text(part.get("content")))
                else:
                    pieces.append(canonical(part))
            elif isinstance(part, str):
                pieces.append(part)
        return "\n".join(pieces)
    return canonical(content)


def _role(m: Mapping[str, object]) -> str:
    """A turn's role; a user turn that only returns tool results (Anthropic's shape) is the tool's turn, as
    OpenAI's ``role: tool`` messages are, so tool output is told apart from what the user typed."""
    role = str(m.get("role", "unknown"))
    content = m.get("content")
    if role == "user" and isinstance(content, list) and content and all(
            isinstance(p, Mapping) and p.get("type") == "tool_result" for p in content):
        return "tool"
    return role


def turn_segments(
    turns: Sequence[object],
    text_of: Callable[[Mapping[str, object]], str],
    *,
    role_of: Callable[[Mapping[str, object]], str] = _role,
    system_roles: tuple[str, ...] = (),
) -> tuple[list[tuple[str, str]], list[str]]:
    """One segment per conversation turn and the system turns' texts, in order.

    A turn whose role is in ``system_roles`` is a ``system`` segment; the last turn with role ``user`` is
    the ``user`` segment; every other turn is ``history:<role>``. Non-mapping turns are skipped."""
    last_user = max(
        (i for i, m in enumerate(turns) if isinstance(m, Mapping) and role_of(m) == "user"),
        default=-1,
    )
    segments: list[tuple[str, str]] = []
    system: list[str] = []
    for i, m in enumerate(turns):
        if not isinstance(m, Mapping):
            continue
        role = role_of(m)
        text = text_of(m)
        if role in system_roles:
            system.append(text)
            segments.append(("system", text))
        else:
            segments.append(("user" if i == last_user else f"history:{role}", text))
    return segments, system


def capture_attributes(segments: list[tuple[str, str]], output_text: str | None,
                       turn_text: str | None = None, turns: Mapping[int, str] | None = None) -> dict[str, object]:
    """Pass-span attributes for the prompt and output under the current capture mode; the output hash is
    over ``turn_text`` (the answer as the canonical assistant turn, assistant_turn.py) when given, and the
    assistant segments in ``turns`` (by index) carry the same form's hash as ``turn``."""
    mode = capture.mode()
    if mode == "none":
        return {}
    attrs = prompt_attributes(segments, mode, turns)
    if not attrs:  # no segment: the prompt hash still names the (empty) prompt
        attrs = {N.PROMPT_SEGMENTS: "[]", N.PROMPT_HASH: capture.hash_text("")}
        if mode == "full":
            attrs[N.PROMPT_TEXT] = ""
    if output_text is not None:
        attrs[N.OUTPUT_HASH] = capture.hash_text(output_text if turn_text is None else turn_text)
        if mode == "full":
            attrs[N.OUTPUT_TEXT] = capture.scrub(output_text)
    return attrs
