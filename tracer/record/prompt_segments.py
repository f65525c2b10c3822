"""A prompt as the store keeps it: one record per segment (system, tools, each history turn, user) with a
keyed hash and a hash chain over fixed-size chunks, so the analyzers can say in which segment, and at which
chunk, two prompts part without a word of them stored. The one definition for the client middleware
(``adapters/segments.py`` turns a request's messages into segments) and the collector
(``otlp_segments.py`` does the same for other instrumentations' spans).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from llmtrace.tracer.record import capture

CHUNK_CHARS = 64


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


def prompt_attributes(segments: list[tuple[str, str]], mode: str) -> dict[str, object]:
    """Pass-span attributes for the prompt under capture ``mode``.

    Each segment is scrubbed once, first, so its ``chars``, its hashes and its place in the full-capture
    text all describe the same string (the divergence finder maps offsets between them)."""
    if mode == "none" or not segments:
        return {}
    scrubbed = [(kind, capture.scrub(text)) for kind, text in segments]
    records = segment_records(scrubbed)
    attrs: dict[str, object] = {
        "llmtrace.prompt.segments": json.dumps(records, separators=(",", ":")),
        "llmtrace.prompt.hash": capture.hash_text("".join(str(r["hash"]) for r in records)),
    }
    if mode == "full":
        attrs["llmtrace.prompt.text"] = rendered(scrubbed)
    return attrs
