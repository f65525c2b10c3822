"""Prompt segments (system, tools, each history turn, user) and what capture mode lets the store keep.

With ``hashes`` each segment becomes a hash plus a hash chain over fixed-size chunks, so the divergence
finder can say in which segment, and at which chunk, two requests' prompts part. With ``full`` the
scrubbed text is kept as well. With ``none`` nothing of the prompt is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from llmtrace.tracer import capture

CHUNK_CHARS = 64


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
    return str(m.get("role", "unknown"))


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
        (i for i, m in enumerate(turns) if isinstance(m, Mapping) and m.get("role") == "user"),
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


def canonical(value: object) -> str:
    """Stable JSON text (sorted keys, no spaces) so equal structures hash equal."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def segment_records(segments: Iterable[tuple[str, str]]) -> list[dict[str, object]]:
    """One record per segment: {kind, hash, chars, chunk_hashes} (the store's llmtrace.prompt.segments)."""
    return [
        {
            "kind": kind,
            "hash": capture.hash_text(text),
            "chars": len(text),
            "chunk_hashes": capture.chunk_hash_chain(text, CHUNK_CHARS),
        }
        for kind, text in segments
    ]


def rendered(segments: Iterable[tuple[str, str]]) -> str:
    """The prompt as one readable text, each segment under its kind (for ``full`` capture)."""
    return "\n".join(f"[{kind}]\n{text}" for kind, text in segments)


def capture_attributes(segments: list[tuple[str, str]], output_text: str | None) -> dict[str, object]:
    """Pass-span attributes for the prompt and output under the current capture mode.

    Each segment is scrubbed once, first, so its ``chars``, its hashes and its place in the full-capture
    text all describe the same string (the divergence finder maps offsets between them)."""
    mode = capture.mode()
    if mode == "none":
        return {}
    segments = [(kind, capture.scrub(text)) for kind, text in segments]
    records = segment_records(segments)
    attrs: dict[str, object] = {
        "llmtrace.prompt.segments": json.dumps(records, separators=(",", ":")),
        "llmtrace.prompt.hash": capture.hash_text("".join(str(r["hash"]) for r in records)),
    }
    if output_text is not None:
        attrs["llmtrace.output.hash"] = capture.hash_text(output_text)
    if mode == "full":
        attrs["llmtrace.prompt.text"] = rendered(segments)
        if output_text is not None:
            attrs["llmtrace.output.text"] = capture.scrub(output_text)
    return attrs
