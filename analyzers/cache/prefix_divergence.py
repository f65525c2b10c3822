"""The prefix-divergence finder: for passes built from one template, where do their prompts part?

Two sources, used together when both exist:
- client pass spans carry ``llmtrace.prompt.segments`` (JSON: kind, hash, chars, chunk_hashes, and text
  with full capture), which gives the segment and a character offset (exact with text, else to the
  64-character chunk);
- server ``intake.tokenization`` spans carry ``llmtrace.tokenization.block_hashes``, a hash chain over KV
  blocks, which gives the token offset where the prefix cache must stop matching.

Chains are cumulative, so only the *first* differing element means anything: everything after it
differs too. Consecutive passes of one template are compared; the offset most pairs part at is reported.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from llmtrace.analyzers.core.query import Query, attr, sample_ids
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import PASS_OPERATIONS

CHUNK_CHARS = 64  # the chunk size capture.chunk_hash_chain uses by default
MAX_PASSES = 2000  # the finder samples the most recent passes; divergence is a per-template property


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where consecutive passes of one template part, and how consistently."""

    template: str  # a readable key: model and segment layout
    pairs: int  # consecutive pairs compared
    parted: int  # pairs that parted at ``segment``/``char_offset``
    segment: str  # segment kind (system, tools, history, user) or "prompt" when only tokens are known
    segment_index: int | None  # None when only a token offset is known
    char_offset: int | None  # offset inside the segment (None when only a token offset is known)
    global_char_offset: int | None  # offset from the start of the prompt (None when unknown)
    exact: bool  # True when computed from text, False when only to chunk resolution
    token_offset: int | None  # first token whose block differs (None when unknown)
    text: str | None  # the text at the offset in the two passes (full capture only)
    other_text: str | None
    trace_ids: tuple[str, ...]

    @property
    def share(self) -> float:
        return self.parted / self.pairs if self.pairs else 0.0

    def describe(self) -> str:
        where = f"segment {self.segment!r}"
        if self.char_offset is not None:
            where += f" at char {self.char_offset}" + ("" if self.exact else f" (within {CHUNK_CHARS} chars)")
        elif self.token_offset is not None:
            where += f" at token {self.token_offset}"
        if self.text is not None:
            where += f": {self.text!r} vs {self.other_text!r}"
        return where


def _first_diff(a: list[str] | tuple[str, ...], b: list[str] | tuple[str, ...]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _text_diff(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _snippet(text: str, at: int, width: int = 40) -> str:
    return text[at:at + width]


def _segment_starts(segs: list[dict[str, Any]]) -> list[int]:
    """Where each segment's text starts in the full-capture prompt text, which the adapters render as
    ``"\n".join(f"[{kind}]\n{text}")``."""
    starts, pos = [], 0
    for s in segs:
        pos += len(f"[{s.get('kind')}]\n")
        starts.append(pos)
        pos += int(s.get("chars") or 0) + 1
    return starts


def client_divergences(q: Query, min_pairs: int = 2, traces: list[str] | None = None) -> list[Divergence]:
    """Divergence from prompt segments on pass spans, per template (side, model, first segment);
    ``traces`` restricts it to those traces (e.g. the passes that missed the cache)."""
    only = "" if traces is None else "AND trace_id IN (SELECT unnest(?::VARCHAR[]))"
    rows = q.rows(f"""
        SELECT trace_id, start_ns, {attr(N.GEN_AI_REQUEST_MODEL)} AS model, {attr(N.SIDE)} AS side,
               {attr(N.PROMPT_SEGMENTS)} AS segments, {attr(N.PROMPT_TEXT)} AS text
        FROM (SELECT trace_id, start_ns, attributes FROM {q.spans}
              WHERE operation IN {PASS_OPERATIONS} {only}
              ORDER BY start_ns DESC LIMIT {2 * MAX_PASSES})
        WHERE {attr(N.PROMPT_SEGMENTS)} IS NOT NULL
        ORDER BY start_ns DESC LIMIT {MAX_PASSES}""", None if traces is None else [traces])
    # (trace id, segments as decoded JSON objects, prompt text)
    groups: dict[str, list[tuple[str, list[dict[str, Any]], str | None]]] = defaultdict(list)
    for r in reversed(rows):
        try:
            segs = json.loads(str(r["segments"]))
        except ValueError:
            continue
        if not isinstance(segs, list) or not segs or not all(isinstance(s, dict) for s in segs):
            continue
        # A template: same side and model, same first segment kind and length (volatile fields of a fixed
        # format, like timestamps, keep the length).
        head = segs[0]
        key = f"{r['model']} · {head.get('kind')}[{head.get('chars')}] · {r['side'] or 'app'}"
        groups[key].append((str(r["trace_id"]), segs, r["text"] if isinstance(r["text"], str) else None))
    out: list[Divergence] = []
    for key, passes in groups.items():
        if len(passes) < min_pairs + 1:
            continue
        spots: Counter[tuple[int, int]] = Counter()
        examples: dict[tuple[int, int], tuple[str, str, int, bool, str | None, str | None]] = {}
        ids: dict[tuple[int, int], list[str]] = defaultdict(list)
        for (tid_a, a, text_a), (tid_b, b, text_b) in zip(passes, passes[1:], strict=False):
            si = _first_diff([str(s.get("hash")) for s in a], [str(s.get("hash")) for s in b])
            if si >= min(len(a), len(b)):
                continue  # one prompt extends the other (a growing conversation): no divergence
            sa, sb = a[si], b[si]
            snippet_a = snippet_b = None
            if text_a is not None and text_b is not None:
                start = _segment_starts(a)[si]
                off, exact = max(0, _text_diff(text_a, text_b) - start), True
                at = start + max(0, off - 12)  # a little context before the first differing character
                snippet_a, snippet_b = _snippet(text_a, at), _snippet(text_b, at)
            else:
                ci = _first_diff(list(sa.get("chunk_hashes") or []), list(sb.get("chunk_hashes") or []))
                off, exact = ci * CHUNK_CHARS, False
            spot = (si, off)
            spots[spot] += 1
            ids[spot].append(tid_b)
            examples.setdefault(spot, (str(sa.get("kind")), tid_a, sum(int(s.get("chars") or 0) for s in a[:si]),
                                       exact, snippet_a, snippet_b))
        if not spots:
            continue
        spot, n = spots.most_common(1)[0]
        kind, tid_a, before, exact, text_a, text_b = examples[spot]
        out.append(Divergence(
            template=key, pairs=len(passes) - 1, parted=n, segment=kind, segment_index=spot[0],
            char_offset=spot[1], global_char_offset=before + spot[1], exact=exact, token_offset=None,
            text=text_a, other_text=text_b, trace_ids=sample_ids([tid_a, *ids[spot]]),
        ))
    # the client's view first (it is what the app sent), then by how many pairs agree
    out.sort(key=lambda d: (not d.template.endswith("client"), -d.parted))
    return out


def server_divergences(q: Query, min_pairs: int = 2, traces: list[str] | None = None) -> list[Divergence]:
    """Divergence from the server's KV block hash chains, per model and block size."""
    only = "" if traces is None else "AND trace_id IN (SELECT unnest(?::VARCHAR[]))"
    rows = q.rows(f"""
        WITH tok AS (
            SELECT trace_id, parent_span_id, start_ns,
                   {attr(N.TOKENIZATION_BLOCK_HASHES)} AS chain
            FROM (SELECT trace_id, parent_span_id, start_ns, attributes FROM {q.spans}
                  WHERE stage = '{S.INTAKE_TOKENIZATION}' {only} ORDER BY start_ns DESC LIMIT {MAX_PASSES})),
        blk AS (
            SELECT parent_span_id, {attr(N.BLOCKS_BLOCK_SIZE)} AS block_size
            FROM {q.spans} WHERE stage = '{S.CACHE_BLOCK_ALLOCATION}'
              AND parent_span_id IN (SELECT parent_span_id FROM tok))
        SELECT tok.trace_id, tok.start_ns, tok.chain, coalesce(blk.block_size, 16) AS block_size,
               coalesce(p.model, '?') AS model
        FROM tok LEFT JOIN blk USING (parent_span_id)
        LEFT JOIN {q.passes} p ON p.server_span_id = tok.parent_span_id
        WHERE tok.chain IS NOT NULL AND len(tok.chain) > 0
        ORDER BY tok.start_ns""", None if traces is None else [traces])
    groups: dict[tuple[str, int], list[tuple[str, list[str]]]] = defaultdict(list)
    for r in rows:
        groups[(str(r["model"]), int(r["block_size"]))].append((str(r["trace_id"]), list(r["chain"])))
    out: list[Divergence] = []
    for (model, block_size), passes in groups.items():
        if len(passes) < min_pairs + 1:
            continue
        spots: Counter[int] = Counter()
        ids: dict[int, list[str]] = defaultdict(list)
        for (_, a), (tid_b, b) in zip(passes, passes[1:], strict=False):
            bi = _first_diff(a, b)
            if bi >= min(len(a), len(b)):
                continue
            spots[bi] += 1
            ids[bi].append(tid_b)
        if not spots:
            continue
        bi, n = spots.most_common(1)[0]
        out.append(Divergence(
            template=f"{model} · blocks of {block_size}", pairs=len(passes) - 1, parted=n, segment="prompt",
            segment_index=None, char_offset=None, global_char_offset=None, exact=False, token_offset=bi * block_size,
            text=None, other_text=None, trace_ids=sample_ids(ids[bi]),
        ))
    out.sort(key=lambda d: -d.parted)
    return out


def find_divergences(q: Query, traces: list[str] | None = None) -> list[Divergence]:
    """Client-side divergences (segment + char) first, then server-side (token offset)."""
    return client_divergences(q, traces=traces) + server_divergences(q, traces=traces)
