"""What each pass *could* have reused from the prefix cache and did not, and why.

For every recent pass the most similar earlier prompt of the same service and model is found (segment by
segment: system, tools, history turns, user). What the two share — the common prefix, plus everything
after the first window where they part that is identical again — is what a cache could serve if the
window sat after the stable part. Set against the tokens the engine actually reused, a pass's uncached
tokens split into:

- ``window``: shared text behind a volatile window (an id, a timestamp, a per-user value, reordered
  examples), or long fixed instructions behind a *block* that changes every call (retrieved notes, a
  profile; analyzers/cache/prompt_compare.py finds the run, ``block_recurs`` wants it in most of the service's
  passes): the prompt's fault, fixable by moving the window;
- ``engine``: a shared *prefix* the engine did not reuse (another replica held it, it was evicted, the
  prefix cache is off);
- ``short``: the prompt is under the minimum cacheable prefix of the engine or provider;
- the rest: genuinely new text (the user's turn, a different template) — nobody's fault.

The window's position is exact with full capture (text), to a chunk with hashes; the middleware's
``llmtrace.divergence.*`` values on ``cache.prefix_match`` win where present (token-exact offsets).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from llmtrace.analyzers.cache.prompt_compare import (
    FIELD_CHARS,
    _Compare,
    _compare,
    _Prompt,
    _segments,
    _strs,
    run_anchor,
)
from llmtrace.analyzers.core.query import SKEW_NS, Query, Row, as_float, as_int, attr
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.views import PASS_OPERATIONS

MAX_PASSES = 2000  # recent passes examined: divergence is a property of a template, not of history
CANDIDATES = 16  # earlier passes of the same service and model compared with each pass
BLOCK_MIN_TOKENS = 64  # fixed text after a block shorter than this is not worth moving the block for
BLOCK_MIN_SHARE = 0.15  # ... nor fixed text under this share of the prompt
BLOCK_MIN_PASSES = 3  # passes that lost fixed text to a block before it is a pattern (block_recurs)
PROVIDER_MIN_PREFIX = {"openai": 1024, "anthropic": 1024, "azure.ai.openai": 1024, "aws.bedrock": 1024,
                       "gcp.gemini": 1024, "gcp.vertex_ai": 1024}


@dataclass(slots=True)
class PassLoss:
    trace_id: str
    start_ns: int
    service: str | None
    model: str | None
    deploy: str | None
    replica: str | None
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: float | None
    cost_usd: float | None
    kind: str = "new"  # window, engine, short, blind, new, hit
    segment: str = ""  # the segment the window is in
    # None: not known (no window found, or the comparison could not place it)
    char_offset: int | None = None  # offset of the window inside that segment
    global_offset: int | None = None  # offset of the window from the start of the prompt (chars)
    token_offset: int | None = None  # first token that missed (engine-reported where available)
    window_class: str = ""
    window_text: str | None = None
    lost_tokens: float = 0.0
    reuse_replica: str | None = None  # the replica that held the shared prefix (engine losses)
    # whether the cached tokens were reported (openai-v2 records none): when not, nothing is blamed on the
    # engine and the window's loss and first missed token are estimated from the prompts alone
    cached_known: bool = True
    engine_boot: str | None = None  # the server process's lifetime (a restart empties every prefix cache)
    chain: list[str] | None = None  # the engine's block-hash chain (the what-if replays it: kv_replay.py)
    partner: PassLoss | None = None  # the earlier pass it shared text with beyond its window
    shared_chars: int = 0  # chars of the prompt a cache could serve with the window at the end
    prompt_chars: int = 0
    window_chars: int = 0  # a block's size (chars)
    run_tokens: float = 0.0  # the fixed text after a block (tokens): the same length in every pass that recurs
    value_class: str = ""  # a block no wider than a field in the user's turn: the value it holds (epoch, uuid, ...)
    run_anchor: int = 0  # a fingerprint of that text (full capture; 0 when unknown): the same in every pass


# The middleware's divergence window on the client's cache.prefix_match span (token-exact where present), read as
# typed columns: the short name _classify asks for -> the registry's value.
_DIVERGENCE = {"template": N.DIVERGENCE_TEMPLATE, "prompt_tokens_est": N.DIVERGENCE_PROMPT_TOKENS_EST,
               "segment": N.DIVERGENCE_SEGMENT, "char_offset": N.DIVERGENCE_CHAR_OFFSET,
               "segment_offset": N.DIVERGENCE_SEGMENT_OFFSET, "token_offset": N.DIVERGENCE_TOKEN_OFFSET,
               "length": N.DIVERGENCE_LENGTH, "class": N.DIVERGENCE_CLASS,
               "shared_prefix_tokens": N.DIVERGENCE_SHARED_PREFIX_TOKENS,
               "reusable_after_tokens": N.DIVERGENCE_REUSABLE_AFTER_TOKENS}


def _div_attrs(row: dict[str, object]) -> dict[str, object]:
    """The divergence values a client's prefix-match row carries (those it does not carry left out)."""
    return {k: row[f"div_{k}"] for k in _DIVERGENCE if row.get(f"div_{k}") is not None}


def _pass_rows(q: Query) -> list[Row]:
    """The newest passes with what the model reads of each: prompt segments (and text), the middleware's
    divergence window, and the server's block chain, block size, first missed token and cache switch."""
    # the newest passes (ties in start time broken by span id, so a run reads the same ones every time), picked
    # once: the three reads below use them, and a top-N over the whole pass table is most of a small read
    newest = q.temp_table(f"""
        SELECT trace_id, start_ns, span_id, service, model, deploy, replica, engine_boot, provider, observed_by,
               client_span_id, server_span_id, prompt_tokens, coalesce(cached_tokens, 0) AS cached_tokens, ttft_ms,
               cost_usd, cached_tokens IS NOT NULL AS cached_known
        FROM {q.passes} WHERE prompt_tokens > 0 ORDER BY start_ns DESC, span_id DESC LIMIT {MAX_PASSES}""")
    passes = q.rows(f"SELECT * FROM {newest} ORDER BY start_ns, span_id")
    if not passes:
        return []
    # Two scans of the spans for everything the model reads: the pass spans' prompt segments (and text with
    # full capture; the client's, else the server's), the middleware's divergence window under the client
    # pass, and the server's block chain, block size and prefix-cache switch under the server pass span.
    # The spans of a pass start inside it (its client span encloses its server span and their stages), so
    # a time bound skips the older row groups; SKEW_NS leaves room for another host's clock. The span ids
    # are a subquery, not a bound list (binding thousands of ids costs more than the scan).
    since = min(as_int(r["start_ns"]) for r in passes) - SKEW_NS
    ids = f"(SELECT client_span_id FROM {newest} UNION ALL SELECT server_span_id FROM {newest})"
    extra = q.rows(f"""
        SELECT span_id, NULL AS parent_span_id, NULL AS stage,
               {attr(N.PROMPT_SEGMENTS)} AS segs, {attr(N.PROMPT_TEXT)} AS text,
               {attr(N.SERVER_ADDRESS)} AS host, {attr(N.SERVER_SPAN_ID)} AS llmtrace_server
        FROM {q.spans} WHERE operation IN {PASS_OPERATIONS} AND start_ns >= {since} AND span_id IN {ids}""")
    # one scan per stage, not one `stage IN (...)`: a list filter is not pushed into the scan, which then
    # decompresses the attributes of every span in the window (twice the CPU of three equality scans)
    under_passes = " UNION ALL ".join(
        f"SELECT * FROM {q.spans} WHERE stage = '{stage}' AND start_ns >= {since} AND parent_span_id IN (SELECT * FROM ids)"
        for stage in (S.CACHE_PREFIX_MATCH, S.CACHE_BLOCK_ALLOCATION, S.INTAKE_TOKENIZATION))
    divergence = ", ".join(f"{attr(name)} AS div_{short}" for short, name in _DIVERGENCE.items())
    extra += q.rows(f"""
        WITH ids AS MATERIALIZED {ids}
        SELECT span_id, parent_span_id, stage,
               {attr(N.PREFIX_FIRST_MISS_TOKEN)} AS first_miss, {attr(N.PREFIX_ENABLED)} AS enabled, {divergence},
               {attr(N.BLOCKS_BLOCK_SIZE)} AS block_size,
               {attr(N.TOKENIZATION_BLOCK_HASHES)} AS chain
        FROM ({under_passes})""")
    by_span: dict[str, dict[str, object]] = {}
    under: dict[tuple[str, str], dict[str, object]] = {}
    for e in extra:
        if e["stage"] is None:
            by_span[str(e["span_id"])] = e
        else:
            under[(str(e["parent_span_id"]), str(e["stage"]))] = e
    rows = []
    for r in passes:
        cid, sid = str(r["client_span_id"]), str(r["server_span_id"])
        cs = by_span.get(cid, {})
        hosted = _hosted(cs)
        if cs.get("segs") is None:  # a foreign client, or no app instrumented: the server's view of the prompt
            cs = by_span.get(sid, {})
        spm = under.get((sid, S.CACHE_PREFIX_MATCH), {})  # the engine's (first_miss: None where none missed)
        rows.append({**r, "segs": cs.get("segs"), "text": cs.get("text"), "hosted": hosted,
                     "div": _div_attrs(under.get((cid, S.CACHE_PREFIX_MATCH), {})),
                     "first_miss": spm.get("first_miss"),
                     "enabled": spm.get("enabled"),
                     "block_size": under.get((sid, S.CACHE_BLOCK_ALLOCATION), {}).get("block_size"),
                     "chain": under.get((sid, S.INTAKE_TOKENIZATION), {}).get("chain")})
    return rows


def load(q: Query) -> list[PassLoss]:
    """Every recent pass with prompt tokens, classified, oldest first."""
    rows = _pass_rows(q)
    out: list[PassLoss] = []
    history: dict[tuple[object, object], list[tuple[_Prompt | None, PassLoss, list[str] | None]]] = {}
    blind: dict[tuple[object, object], int] = {}  # passes seen per service and model with no prompt on record
    for r in rows:
        pl = PassLoss(str(r["trace_id"]), as_int(r["start_ns"]), _opt(r["service"]), _opt(r["model"]), _opt(r["deploy"]),
                      _opt(r["replica"]), as_int(r["prompt_tokens"]), as_int(r["cached_tokens"]),
                      _opt_float(r["ttft_ms"]), _opt_float(r["cost_usd"]), cached_known=bool(r["cached_known"]),
                      engine_boot=_opt(r["engine_boot"]))
        out.append(pl)
        prompt = _segments(r["segs"], r["text"])
        server = r["observed_by"] in ("both", "server")
        # cache granularity: what the engine reported, else 16-token blocks for a self-hosted engine (vLLM,
        # llmtrace serve) and 128-token increments for a hosted provider
        block = as_int(r["block_size"]) or (16 if server or not r["hosted"] else 128)
        # a hosted provider's minimum cacheable prefix applies only when the call went to that provider;
        # the same SDK pointed at vLLM, llama.cpp or llmtrace serve caches whole blocks from the first one
        minimum = block if server or not r["hosted"] else PROVIDER_MIN_PREFIX.get(str(r["provider"]), block)
        if r["enabled"] is False:
            minimum = 1 << 30
        tpc = pl.prompt_tokens / prompt.chars if prompt is not None and prompt.chars else 0.25
        key = (r["service"], r["model"])
        past = history.setdefault(key, [])
        chain = _strs(r["chain"]) or None
        pl.chain = chain
        _classify(pl, prompt, chain, past, tpc, block, minimum, r["div"], r["first_miss"])
        if prompt is None and chain is None:
            _blind(pl, block, blind, key)
        if prompt is not None or chain is not None:
            past.append((prompt, pl, chain))
            del past[:-CANDIDATES]
    return out


# Hosts of the providers whose prompt caches start at a minimum prefix (PROVIDER_MIN_PREFIX)
HOSTED_SUFFIXES = ("api.openai.com", ".openai.azure.com", "api.anthropic.com", ".amazonaws.com",
                   "generativelanguage.googleapis.com", "aiplatform.googleapis.com")


def _hosted(client_pass: dict[str, object]) -> bool:
    """Whether a client pass went to a hosted provider: its host is one of theirs, and the server did not
    name an llmtrace pass span of its own (then it is ``llmtrace serve``, whatever SDK called it). A pass
    without a recorded host (OpenInference and openai-v2 record none) is not taken as hosted: every
    instrumentation of the openai SDK says provider ``openai`` whatever its base URL, so the provider's name
    is no evidence, and calling such prompts too short to cache would hide the field that splits them."""
    if client_pass.get("llmtrace_server"):
        return False
    host = str(client_pass.get("host") or "").lower()
    return bool(host) and host.endswith(HOSTED_SUFFIXES)


def _chain_lcp(a: list[str], b: list[str]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # one comparison in C for the common case (a chain that extends the other)
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def _engine_gap(pl: PassLoss, chain: list[str], past: list[tuple[_Prompt | None, PassLoss, list[str] | None]],
                block: int) -> tuple[float, str | None]:
    """From the server's KV block chains (token-exact): prefix tokens an earlier pass had computed that this
    one did not reuse, and the replica that held the longest of them."""
    best, where = 0, None
    same = 0
    for _, prev, prev_chain in past:
        if not prev_chain:
            continue
        if prev.ttft_ms is not None and prev.start_ns + prev.ttft_ms * 1e6 > pl.start_ns:
            continue  # still prefilling when this one arrived (a concurrent burst): nothing of it was cached yet
        if prev.engine_boot != pl.engine_boot:
            continue  # served before the server restarted: every prefix cache started empty since
        n = _chain_lcp(chain, prev_chain)
        if prev.replica == pl.replica:
            same = max(same, n)
        if n > best:
            best, where = n, prev.replica
    reusable = min(best * block, pl.prompt_tokens - 1)
    if same * block >= reusable - block:
        where = pl.replica  # the same replica held (almost) as much: not a routing loss
    return max(0.0, reusable - pl.cached_tokens), where


def _blind(pl: PassLoss, block: int, seen: dict[tuple[object, object], int], key: tuple[object, object]) -> None:
    """No prompt on record (an instrumentation with its content capture off, openai-v2's default): a pass that
    prefilled most of its prompt again after an earlier pass of the same service and model is a reuse the
    cache may have lost, but where the prompts part cannot be told, so no loss is claimed for it."""
    before = seen.get(key, 0)
    seen[key] = before + 1
    uncached = pl.prompt_tokens - pl.cached_tokens
    if pl.kind == "new" and pl.cached_known and before and uncached > max(2 * block, 0.5 * pl.prompt_tokens):
        pl.kind = "blind"


def block_counts(run_tokens: float, prefix_tokens: float, prompt_tokens: int, block: int, minimum: int) -> bool:
    """Whether fixed text this long after a block (or in the user's own turn) is worth a move: several KV blocks
    and a good part of the prompt, and with what precedes the block at least the minimum cacheable prefix."""
    return run_tokens >= max(BLOCK_MIN_TOKENS, 4 * block) and run_tokens >= BLOCK_MIN_SHARE * prompt_tokens \
        and prefix_tokens + run_tokens >= minimum


def _classify(pl: PassLoss, prompt: _Prompt | None, chain: list[str] | None,
              past: list[tuple[_Prompt | None, PassLoss, list[str] | None]], tpc: float,
              block: int, minimum: int, div: dict[str, object], first_miss: int | None) -> None:
    uncached = pl.prompt_tokens - pl.cached_tokens
    if uncached <= block:
        pl.kind = "hit"
        return
    if minimum >= 1 << 30:  # the engine said its prefix cache is off: every prompt token is prefilled
        pl.kind, pl.lost_tokens = "off", float(uncached)
        return
    # under the minimum cacheable prefix (a hosted provider's 1,024 tokens; for an engine that caches whole
    # blocks, prompts of a few blocks, whose shared part rarely fills one): a low hit rate there is
    # expected, not a miss
    if pl.prompt_tokens < max(minimum, 4 * block):
        pl.kind, pl.lost_tokens = "short", 0.0
        return
    if chain:
        gap, where = _engine_gap(pl, chain, past, block)
        if gap > block and pl.cached_tokens + gap >= minimum:
            pl.kind, pl.lost_tokens, pl.reuse_replica = "engine", gap, where
            pl.token_offset = pl.cached_tokens
            return
    best: tuple[_Compare, PassLoss] | None = None
    if prompt is not None:
        for prev, prev_pl, _ in reversed(past):
            if prev is None:
                continue
            c = _compare(prompt, prev)
            if best is None or (c.shared, c.prefix) > (best[0].shared, best[0].prefix):
                best = (c, prev_pl)
                if c.shared >= 0.9 * prompt.stable_chars:
                    break  # (almost) everything but the user's turn is shared: the rest can only tie
    if best is None:
        return
    c, prev_pl = best
    prefix_tokens = c.prefix * tpc
    shared_tokens = min(c.shared * tpc, pl.prompt_tokens - 1)
    # without the engine's chains (a hosted provider) the prefix is estimated from characters: only a gap
    # far beyond that estimate's error is the engine's
    engine_gap = prefix_tokens - pl.cached_tokens
    if not chain and pl.cached_known and engine_gap > max(4 * block, 0.4 * prefix_tokens) and prefix_tokens >= minimum:
        pl.kind, pl.lost_tokens = "engine", engine_gap
        pl.reuse_replica = prev_pl.replica
        pl.token_offset = pl.cached_tokens
        return
    # never more than was actually prefilled: a client-side estimate can see text the server never got
    # (tools a server leaves out with tool_choice none, say)
    window_gap = min(shared_tokens - max(pl.cached_tokens, prefix_tokens), uncached)
    run_tokens = c.run * tpc
    if c.run and not block_counts(run_tokens, prefix_tokens, pl.prompt_tokens, block, minimum):
        window_gap = 0.0  # a short run after different content: nothing a move would make cacheable
    if c.segment and not c.distinct and window_gap > 2 * block:
        pl.kind, pl.lost_tokens = "window", window_gap
        pl.segment, pl.char_offset, pl.window_class, pl.window_text = c.segment, c.seg_offset, c.window_class, c.window_text
        pl.global_offset = c.prefix
        pl.window_chars, pl.run_tokens, pl.run_anchor = c.width, run_tokens, run_anchor(prompt, c) if prompt else 0
        pl.value_class = c.value_class
        pl.partner, pl.shared_chars, pl.prompt_chars = prev_pl, c.shared, prompt.chars if prompt is not None else 0
        pl.token_offset = int(first_miss) if isinstance(first_miss, int) else \
            pl.cached_tokens if pl.cached_known else int(prefix_tokens)
    # the middleware's own divergence window, when it recorded one, is token-exact and names the class
    if div and pl.kind in ("window", "new"):
        _apply_divergence(pl, div, first_miss, uncached, block, minimum)


def _apply_divergence(pl: PassLoss, div: dict[str, object], first_miss: int | None, uncached: int, block: int,
                      minimum: int) -> None:
    """The middleware's own divergence window, when it recorded one, is token-exact and names the class: it
    settles what the hashed pieces could only estimate."""
    reusable = div.get("reusable_after_tokens")
    cls = div.get("class")
    width = div.get("length")
    # different text wider than a field (retrieved notes, a profile), or several values with short fixed words
    # between them (the middleware's "fields": a per-request profile), with long fixed text after it: a block
    wide = (cls == "fields" or cls == "free_text" and isinstance(width, int) and width > FIELD_CHARS) and \
        isinstance(width, int) and isinstance(reusable, (int, float)) and \
        block_counts(float(reusable), 0.0, pl.prompt_tokens, block, minimum)
    if cls == "fields" and not wide:
        cls = "free_text"  # too little fixed text after the values to move them for: different content
    if pl.kind == "new" and isinstance(reusable, (int, float)) and min(reusable, uncached) > 2 * block \
            and (cls != "free_text" or wide):
        pl.kind, pl.lost_tokens = "window", float(min(reusable, uncached))
        pl.segment = str(div.get("segment") or "prompt")
    # (a block found from the hashed pieces is known to a piece; the middleware's is exact)
    if wide and pl.kind == "window" and (pl.window_class in ("", "field", "free_text") or
                                         pl.window_class == "block" and pl.window_text is None) \
            and isinstance(width, int) and isinstance(reusable, (int, float)):
        pl.window_class, pl.window_chars, pl.run_tokens = "block", width, float(reusable)
    if pl.kind == "window" and pl.window_class == "field" and cls == "free_text" \
            and isinstance(reusable, (int, float)) and reusable <= 2 * block:
        # a hashes-only guess (same length, so maybe one field) that the middleware, which saw the text,
        # contradicts: different content with nothing reusable after it is another template
        pl.kind, pl.lost_tokens, pl.segment, pl.window_class = "new", 0.0, "", ""
        return
    if pl.kind == "window":
        if isinstance(cls, str) and cls and pl.window_class in ("", "field", "free_text"):
            pl.window_class = cls
        # the engine's first missed token, or the cached tokens the engine or provider reported, beat the
        # client's estimate: "the cache stops at token 4" beside an engine that cached 16 is two numbers
        engine_reported = isinstance(first_miss, int) or pl.cached_known
        for name, fld in (("segment_offset", "char_offset"), ("char_offset", "global_offset"),
                          ("token_offset", "token_offset")):
            v = div.get(name)
            if isinstance(v, int) and v >= 0 and not (fld == "token_offset" and engine_reported):
                setattr(pl, fld, v)
        if pl.token_offset is None and pl.cached_known:
            pl.token_offset = pl.cached_tokens


@dataclass(slots=True)
class Cause:
    """Passes that lost cache reuse to one cause."""

    kind: str
    key: str
    passes: list[PassLoss] = field(default_factory=list)

    @property
    def lost_tokens(self) -> float:
        return sum(p.lost_tokens for p in self.passes)


def causes(passes: list[PassLoss]) -> list[Cause]:
    """The losses grouped by cause (window: segment and class; engine: whether another replica held it)."""
    groups: dict[str, Cause] = {}
    for p in passes:
        if p.kind == "window":
            key = f"window:{p.segment.split(':')[0]}:{p.window_class}"
        elif p.kind == "engine":
            key = "engine:replica" if p.reuse_replica is not None and p.reuse_replica != p.replica else "engine:same"
        elif p.kind in ("short", "off", "blind"):
            key = p.kind
        else:
            continue
        groups.setdefault(key, Cause(p.kind, key)).passes.append(p)
    return sorted(groups.values(), key=lambda c: -c.lost_tokens)


def block_recurs(c: Cause, scope: list[PassLoss]) -> bool:
    """A block cause is a pattern, not a coincidence: the same fixed text (as long, within a quarter) follows
    the block in most of its passes, and they are several, a good part of the service's passes (``scope``)
    and more than those that reused half their prompt from the cache. Documents edited here and there share
    a tail of another length each time; a few personas, each reused, miss once apiece and hit after that;
    retrieved chunks that recur at shifted places share other text each time."""
    runs = sorted(p.run_tokens for p in c.passes)
    deploys = {p.deploy for p in c.passes}  # a deploy that moved the block up is weighed against its own passes
    scope = [p for p in scope if p.deploy in deploys]
    reused = sum(1 for p in scope if p.cached_tokens >= 0.5 * p.prompt_tokens)  # hits, or near enough
    if len(runs) < max(BLOCK_MIN_PASSES, 0.2 * len(scope), reused):
        return False
    mid = runs[len(runs) // 2]
    if sum(1 for r in runs if abs(r - mid) <= 0.25 * mid) < 0.6 * len(runs):
        return False
    anchors = [p.run_anchor for p in c.passes if p.run_anchor]  # full capture: the same text, not just as long
    return not anchors or Counter(anchors).most_common(1)[0][1] >= 0.6 * len(anchors)


def ms_per_token(passes: list[PassLoss]) -> float:
    """TTFT per uncached prompt token: the median of pairwise slopes (Theil-Sen, robust to the queueing and
    scheduling noise in single TTFTs) over up to 200 recent passes, never more than the median TTFT per
    uncached token (all of a first token's wait blamed on prefill) and never below 0."""
    pts = [(p.prompt_tokens - p.cached_tokens, float(p.ttft_ms)) for p in passes if p.ttft_ms is not None][-200:]
    if len(pts) < 3:
        return 0.0
    slopes = sorted((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:] if x2 != x1)
    per = sorted(y / x for x, y in pts if x > 0)
    if not slopes or not per:
        return 0.0
    return max(0.0, min(slopes[len(slopes) // 2], per[len(per) // 2]))


def usd_per_token(passes: list[PassLoss]) -> float:
    """What an uncached prompt token costs over a cached one, from the passes' own prices (0 when unpriced):
    the median price per prompt token, of which a cache read saves ~90% at the big providers."""
    xs = sorted(float(p.cost_usd) / p.prompt_tokens for p in passes if p.cost_usd and p.prompt_tokens)
    return 0.9 * xs[len(xs) // 2] if xs else 0.0


def _opt(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_float(value: object) -> float | None:
    return None if value is None else as_float(value)
