"""What a cache finding's fix would buy, by replaying the recorded block-hash chains with the fix applied.

For the bundled backend each pass records its chain of KV block hashes. A volatile window (an id, a
timestamp, a per-user value) makes every block from the window on differ between prompts of one template;
moving the window after the stable part makes the blocks up to the end of the stable part equal across the
template. The replay rewrites each pass of the template that way, in hash space:

- the blocks before the window stay as recorded (the engine already shared them);
- the blocks from the window to the end of the stable part (what the cache-loss model says a cache could
  have served: ``cached + lost`` tokens) become one shared run per template;
- the rest (the user's turn, then the window) stays the pass's own.

The template's passes are the cause's passes, the earlier pass each shared its text with (the template's
cold start) and repeats that recorded the same chain through a member's stable part (the same value again).
All passes, rewritten or not, then go through the LRU prefix cache of the engine's own pool size
(kv_replay.py), so eviction under the fixed traffic counts too. Without recorded chains (a hosted provider,
a middleware-only store) the numbers are an estimate from token counts, and the evidence says which.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

from llmtrace.analyzers.cache import kv_replay
from llmtrace.analyzers.cache.cache_loss import Cause, PassLoss
from llmtrace.analyzers.cache.ttft_evidence import ttft_parts
from llmtrace.analyzers.core.finding import Evidence
from llmtrace.analyzers.core.query import Query

METHOD = "what-if computed by"
# blocks before the window, blocks through the stable part, template key, blocks the window spans (at least 1)
_Plan = tuple[int, int, str, int]


def _newest(passes: Sequence[PassLoss], budget: int = kv_replay.REPLAY_BLOCK_VISITS) -> list[PassLoss]:
    """The newest passes with a chain, at most ``budget`` blocks' worth (diagnose stays fast)."""
    out: list[PassLoss] = []
    used = 0
    for p in reversed(passes):
        if not p.chain:
            continue
        used += len(p.chain)
        if used > budget and out:
            break
        out.append(p)
    return out[::-1]


def _window_tokens(text: str, cls: str, average: float) -> float:
    """Tokens of a window's value: ids and digits split into far more tokens than prose (common tokenizers
    give each digit and each separator its own token, and cut hex or base64 ids into short pieces), so the
    prompt's average ratio would understate the window and overstate the stable text after it."""
    if cls in ("free_text", "field", "whitespace", "invisible", "reordered", "block", ""):
        return len(text) * average
    return float(sum(1.0 if not ch.isalpha() else 0.6 for ch in text))


def _window_span(p: PassLoss) -> tuple[int, float]:
    """Chars and tokens of the pass's window within the part of its prompt a cache could not serve. A block
    (retrieved notes, a profile) keeps only its first chars as text: its recorded width says how wide it is."""
    unshared = max(0, p.prompt_chars - p.shared_chars)
    average = p.prompt_tokens / max(1, p.prompt_chars)
    if p.window_class == "block" and p.window_chars > 0:
        chars = min(p.window_chars, unshared)
        return chars, chars * average
    text = (p.window_text or "")[:unshared]
    return len(text), _window_tokens(text, p.window_class, average)


def _stable_tokens(p: PassLoss, head_tokens: int) -> float:
    """Tokens of the prompt a cache serves once the window sits after the stable part: the shared chars at
    the density of the prompt's text without the window (the window's own tokens taken out first)."""
    if p.shared_chars > 0 and p.prompt_chars > p.shared_chars:
        chars, w = _window_span(p)
        density = max(0.0, p.prompt_tokens - w) / max(1, p.prompt_chars - chars)
        return min(p.prompt_tokens - 1.0, max(float(head_tokens), p.shared_chars * density))
    return max(p.cached_tokens, head_tokens) + p.lost_tokens


def _plans(c: Cause, passes: Sequence[PassLoss], block: int) -> dict[int, _Plan]:
    plans: dict[int, _Plan] = {}
    for p in c.passes:
        chain = p.chain or []
        head = min(len(chain), max(0, p.token_offset if p.token_offset is not None else p.cached_tokens) // block)
        stable = min(len(chain), int(_stable_tokens(p, head * block)) // block)
        span = _window_span(p)[1]
        plans[id(p)] = (head, max(head, stable), f"{c.key}|{chain[head - 1] if head else ''}",
                        max(1, math.ceil(span / block)))
    for p in c.passes:  # the earlier pass it shared its text with: the template's cold start
        mate = p.partner
        if mate is not None and mate.chain and id(mate) not in plans:
            h, s, k, w = plans[id(p)]
            plans[id(mate)] = (min(h, len(mate.chain)), min(s, len(mate.chain)), k, w)
    # repeats: a pass whose recorded chain equals a member's through the member's stable part is the same
    # template with the same value again (it hit in the recording; it must hit in the fixed replay too)
    by_end: dict[int, dict[str, _Plan]] = {}
    for p in passes:
        if id(p) in plans and p.chain:
            h, s, k, w = plans[id(p)]
            if s > 0:
                by_end.setdefault(s, {})[p.chain[s - 1]] = (h, s, k, w)
    for p in passes:
        if id(p) in plans or not p.chain:
            continue
        for s, ends in by_end.items():
            if len(p.chain) >= s and p.chain[s - 1] in ends:
                plans[id(p)] = ends[p.chain[s - 1]]
                break
    return plans


def _rewrite(chain: Sequence[str], plan: _Plan, own: str) -> list[str]:
    """The chain with the window moved: what follows the stable part (the user's turn, then the window) is
    the pass's own, except where the recording proves two passes agree there. A block hash covers every
    token before it, so two passes with the same recorded block there sent the same text through it (the
    same window value, the same turns: one conversation's next call): with the window moved they still
    do, and share it. Where the recorded blocks differ nothing says they would agree (the user's words may
    sit in the last, partial block, which is never hashed), so they stay the pass's own. Without this, a
    per-conversation id at the top replayed *worse* fixed than recorded: each turn's history, reused within
    its conversation in the recording, became every call's own."""
    head, stable, key, span = plan
    # A recorded hash is its text's identity. With the window (``span`` blocks at most) taken out ahead of
    # block i, two passes agree through fixed block i where the recording has them agree ``span`` blocks
    # further on; past the recorded chain nothing says so, and the block is the pass's own.
    n = len(chain)
    after = (f"~{key}|{chain[i + span]}" if i + span < n else f"~{own}/{i}" for i in range(stable, n))
    return [*chain[:head], *(f"{key}/{i}" for i in range(head, stable)), *after]


def fixed_chains(c: Cause, passes: Sequence[PassLoss], block: int) -> list[kv_replay.Chain]:
    """Every pass's chain (oldest first) as it would have been with this cause fixed."""
    if c.key == "engine:replica":  # prefix-aware routing: one pool for all replicas, keyed by prefix
        return [("", p.chain or [], p.prompt_tokens, p.cached_tokens) for p in passes]
    plans = _plans(c, passes, block)
    return [(p.replica or "", _rewrite(p.chain or [], plans[id(p)], f"{p.trace_id}:{p.start_ns}") if id(p) in plans else p.chain or [],
             p.prompt_tokens, p.cached_tokens) for p in passes]


def replay_fixed(fixes: Sequence[Cause], passes: Sequence[PassLoss], pool: kv_replay.Pool) -> kv_replay.Replayed:
    """The newest passes replayed with every one of ``fixes`` (window causes) applied at once: what the
    what-if request log should measure."""
    recent = _newest(passes)
    plans: dict[int, _Plan] = {}
    for c in fixes:
        for k, v in _plans(c, recent, pool.block_size).items():
            plans.setdefault(k, v)
    chains = [(p.replica or "", _rewrite(p.chain or [], plans[id(p)], f"{p.trace_id}:{p.start_ns}") if id(p) in plans else p.chain or [],
               p.prompt_tokens, p.cached_tokens) for p in recent]
    return kv_replay.simulate(chains, pool.blocks or None, pool.block_size)


def _estimate(c: Cause, passes: list[PassLoss]) -> tuple[float, float, float]:
    prompt = sum(p.prompt_tokens for p in passes)
    cached = sum(min(p.cached_tokens, p.prompt_tokens) for p in passes)
    return prompt, cached, cached + c.lost_tokens


_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def prefill_ms_per_token(q: Query, trace_ids: Sequence[str]) -> float:
    """The engine's own prefill time per uncached prompt token (the ``ttft_breakdown`` view over a few
    server passes), for when the TTFT-against-tokens fit has too little spread in prompt lengths to say;
    0 when the store cannot say."""
    ids = [t for t in dict.fromkeys(trace_ids) if _TRACE_ID.fullmatch(t)][-50:]
    if not ids:
        return 0.0
    rows = [r for r in ttft_parts(q, ids, "prefill") or () if r["ms"] is not None]
    per = [float(r["ms"]) / float(r["uncached"]) for r in rows if r["uncached"] and float(r["uncached"]) > 0]
    return statistics.median(per) if per else 0.0


def what_if(c: Cause, passes: list[PassLoss], mspt: float, usdpt: float, pool: kv_replay.Pool | None = None,
            prefill_mspt: float = 0.0) -> list[Evidence]:
    """What the fix would buy: hit rate, prefill tokens, TTFT and cost per 1,000 calls if fixed. Replayed from
    the recorded chains when every affected pass has one, else estimated from the token counts. The TTFT
    saved is the prefill saved at ``mspt`` ms a token (fitted on the passes), else at the engine's own
    prefill time a token (``prefill_mspt``)."""
    mspt = mspt if mspt > 0 else prefill_mspt
    replayed = pool is not None and c.kind in ("window", "engine") and all(p.chain for p in c.passes)
    check: Evidence | None = None
    if replayed and pool is not None:
        recent = _newest(passes)
        block = pool.block_size
        replicas = len({p.replica for p in recent})
        cap = pool.blocks or None
        if c.key == "engine:replica" and cap is not None:
            cap *= replicas
        fixed = kv_replay.simulate(fixed_chains(c, recent, block), cap, block)
        as_recorded = kv_replay.simulate([(p.replica or "", p.chain or [], p.prompt_tokens, p.cached_tokens)
                                          for p in recent], pool.blocks or None, block)
        prompt = float(fixed.prompt_tokens)
        cached = float(sum(min(p.cached_tokens, p.prompt_tokens) for p in recent))
        served = float(fixed.hit_tokens)
        n = len(recent)
        where = (f"an LRU prefix cache of {pool.blocks} blocks per replica (the engine's pool)" if pool.blocks
                 else "an unbounded LRU prefix cache (no pool size recorded)")
        route = " with the volatile window moved after the stable part"
        if c.key == "engine:replica":
            route = " routed by prefix"
            where = (f"one LRU prefix cache of {cap} blocks (the {replicas} replicas' pools together)" if cap
                     else "one unbounded LRU prefix cache for all replicas")
        method = f"replaying {n} recorded block-hash chains{route} through {where}"
        check = Evidence("replayed hit rate as recorded (the replay's own check)", round(as_recorded.token_rate, 3), "",
                         baseline=round(cached / prompt, 3) if prompt else None)
    else:
        prompt, cached, served = _estimate(c, passes)
        n = len(passes)
        method = ("estimate from token counts (cached + lost tokens): no block-hash chains recorded for these "
                  "passes (a hosted provider or a middleware-only store)")
    saved = max(0.0, served - cached)
    ev = [Evidence("hit rate if fixed", round(served / prompt, 3) if prompt else None, "",
                   baseline=round(cached / prompt, 3) if prompt else None),
          Evidence("prefill tokens per 1,000 calls if fixed", round(1000 * (prompt - cached - saved) / n), "tokens",
                   baseline=round(1000 * (prompt - cached) / n))]
    ttfts = sorted(float(p.ttft_ms) for p in passes if p.ttft_ms is not None)
    if ttfts and mspt > 0:
        now = ttfts[len(ttfts) // 2]
        ev.append(Evidence("median TTFT if fixed", round(max(0.0, now - mspt * saved / n), 1), "ms", baseline=round(now, 1)))
    if usdpt > 0:
        ev.append(Evidence("cost per 1,000 calls saved if fixed", round(1000 * usdpt * saved / n, 4), "USD"))
    ev.append(Evidence(METHOD, method, ""))
    if check is not None:
        ev.append(check)
    return ev


def curve_evidence(curve: kv_replay.SizeCurve | None) -> list[Evidence]:
    """The hit rate against KV pool size, replayed, beside what the engine measured: whether the miss is the
    prompt or memory pressure."""
    if curve is None:
        return []
    ev = [Evidence("measured hit rate (engine)", round(curve.measured, 3), "")]
    ev += [Evidence(f"replayed hit rate at {p.multiple:g}x the KV pool ({p.blocks} blocks)", round(p.hit_rate, 3), "")
           for p in curve.points]
    verdict = ("memory pressure: a larger KV pool would serve more of these prompts" if curve.memory_bound else
               "the prompts: a larger KV pool would not serve more of them")
    ev.append(Evidence("what limits the hit rate (replayed pool sizes)", verdict, ""))
    return ev


def passes_curve(passes: Sequence[PassLoss], pool: kv_replay.Pool) -> kv_replay.SizeCurve | None:
    recent = _newest(passes)
    return kv_replay.size_curve([(p.replica or "", p.chain or [], p.prompt_tokens, p.cached_tokens)
                                 for p in recent], pool)


def grow_hint(curve: kv_replay.SizeCurve | None) -> str:
    """" (replayed, a pool twice the size would have served N% ...)" for a fix that grows the pool."""
    two = curve.at(2.0) if curve is not None else None
    if curve is None or two is None:
        return ""
    return f" (replayed, a pool twice the size would have served {two:.0%} of prompt tokens, against " \
           f"{curve.measured:.0%} measured)"


GROW_POOL = ("Grow the KV pool{hint} (or add a host tier, cache.host_offload), lower max_running, or use an "
             "eviction policy that keeps shared prefixes (leaf_first); then re-check the hit rate with `llmtrace check`.")
