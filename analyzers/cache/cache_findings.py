"""Findings from the cache-loss model (analyzers/cache/cache_loss.py): one per cause, ranked by what it lost.

"uuid at char 2423 of the tools → the cache stops at token 608 → 39% of prompt tokens re-prefilled": the
window, the engine's first missed token and the loss in tokens, TTFT and money, with the share of passes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from llmtrace.analyzers.cache import kv_replay
from llmtrace.analyzers.cache import what_if as replay_what_if
from llmtrace.analyzers.cache.cache_loss import (
    Cause,
    PassLoss,
    block_recurs,
    causes,
    load,
    ms_per_token,
    usd_per_token,
)
from llmtrace.analyzers.cache.ttft_evidence import ttft_share
from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.core.query import Query, attr, percentile, sample_ids
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

if TYPE_CHECKING:
    from llmtrace.analyzers.core.base import SymptomAnalyzer

MIN_SHARE = 0.05  # of all prompt tokens: less is not worth a line
MIN_PASSES = 2  # token counts are not noisy: two passes that lost a shared prefix is already a pattern
SHARE_LABEL = "share of prompt tokens re-prefilled"  # the headline's quantity, said the same in its evidence


def segment_base(segment: str) -> str:
    return segment.split(":")[0] if segment else "prompt"


# what a segment is called in a sentence ("at char 14 of the system prompt"); the others read as they are
SEGMENT_NAMES = {"system": "system prompt"}


def segment_name(base: str) -> str:
    return SEGMENT_NAMES.get(base, base)


def window_cause(segment: str) -> str:
    """The cause key of a volatile window in a segment: the same one the deploy comparison uses."""
    return f"prompt-window:{segment_base(segment)}"


def _severity(token_share: float) -> Severity:
    return "critical" if token_share >= 0.25 else "warning" if token_share >= 0.08 else "info"


def _a(kind: str) -> str:
    """A value's kind with its article: "an epoch", "a uuid" (a uuid is said you-you-id)."""
    return f"{'an' if kind[:1] in 'aeio' else 'a'} {kind}"


def _median(xs: list[float]) -> float:
    return float(percentile(xs, 0.5) or 0.0)


def cache_findings(analyzer: SymptomAnalyzer, q: Query) -> list[Finding]:
    passes = load(q)
    if len(passes) < MIN_PASSES:
        return []
    total_tokens = sum(p.prompt_tokens for p in passes)
    mspt, usdpt = ms_per_token(passes), usd_per_token(passes)
    out: list[Finding] = []
    # the bundled backend's block chains and pool size: the what-if and the pool-size curve are replays
    chains = any(p.chain for p in passes)
    pool: kv_replay.Pool | None = None
    prefill = 0.0  # the engine's prefill ms a token, for the what-if TTFT when the fit cannot say
    curve: kv_replay.SizeCurve | None = None
    curve_lines: list[Evidence] | None = None
    services = {p.service for p in passes}
    for c in causes(passes):
        if len(c.passes) < MIN_PASSES and c.kind != "short":
            continue
        # A store of several apps (a collector's, one server's many clients): a cause is weighed against the
        # traffic of the services it was seen in, as `diagnose --service` would, or one app's broken cache
        # drowns in the other apps' tokens (six planted windows in a store of 17 services: none over 5%).
        own = {p.service for p in c.passes}
        scope = passes if own == services else [p for p in passes if p.service in own]
        scope_tokens = total_tokens if own == services else sum(p.prompt_tokens for p in scope)
        share = c.lost_tokens / scope_tokens if scope_tokens else 0.0
        if c.kind not in ("short", "off", "blind") and share < MIN_SHARE:
            continue
        if c.key.endswith(":block") and not block_recurs(c, scope):
            continue
        builder = {"window": _window, "engine": _engine, "short": _short, "off": _off, "blind": _blind}[c.kind]
        if pool is None and chains and c.kind in ("window", "engine"):
            pool = kv_replay.pool(q)  # read once, and only for a finding that replays
            if mspt <= 0:  # prompts of one length: no TTFT fit, but the engine says what its prefill took
                prefill = replay_what_if.prefill_ms_per_token(q, [p.trace_id for p in passes])
        f = builder(analyzer, q, c, scope, share, mspt, usdpt, pool, prefill)
        if f is not None and own != services:
            names = sorted(str(s) for s in own)
            # a window is each app's own prompt: two apps' windows in the system prompt are two causes, not
            # one to merge (a server's routing or pool, the engine's causes, is one cause for all its apps)
            cause = f"{f.cause}@{','.join(names)}" if f.cause.startswith("prompt-window:") else f.cause
            f = dataclasses.replace(f, cause=cause, title=f"{f.title} (service{'s' if len(names) > 1 else ''} "
                                    f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
        if f is not None and pool is not None and c.kind in ("window", "engine"):
            if curve_lines is None:  # one replay per size for all findings
                curve = replay_what_if.passes_curve(passes, pool)
                curve_lines = replay_what_if.curve_evidence(curve)
            f = dataclasses.replace(f, evidence=(*f.evidence, *curve_lines))
            if c.key == "engine:same" and curve is not None and curve.memory_bound:
                f = dataclasses.replace(f, next_check=replay_what_if.GROW_POOL.format(hint=replay_what_if.grow_hint(curve)))
        if f is not None:
            out.append(_with_ttft_split(q, f))
    return out


def _with_ttft_split(q: Query, f: Finding) -> Finding:
    """The finding with where its passes' first-token time went, when the store's time views can say."""
    line = ttft_share(q, f.trace_ids)
    return f if line is None else dataclasses.replace(f, evidence=(*f.evidence, line))


def _loss_evidence(c: Cause, passes: list[PassLoss], share: float, mspt: float, usdpt: float) -> list[Evidence]:
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    # one quantity for the headline, this line and the what-if: prompt tokens re-prefilled that a cache could
    # have served, as a share of all the passes' prompt tokens (how many passes it touched is a count beside it)
    ev = [Evidence("passes affected", len(c.passes), f"of {len(passes)}", ids),
          Evidence("prompt tokens re-prefilled that a cache could have served", round(c.lost_tokens), "tokens", ids),
          Evidence(SHARE_LABEL, round(share, 3), f"of the {sum(p.prompt_tokens for p in passes):,} prompt tokens "
                   f"of all {len(passes)} passes")]
    if mspt > 0:
        ev.append(Evidence("TTFT lost per affected pass", round(mspt * c.lost_tokens / len(c.passes), 1), "ms", ids))
    if usdpt > 0:
        ev.append(Evidence("cost lost per 1,000 calls", round(1000 * usdpt * c.lost_tokens / len(passes), 4), "USD"))
    return ev


def what_if(c: Cause, passes: list[PassLoss], mspt: float, usdpt: float,
            pool: kv_replay.Pool | None = None, prefill_mspt: float = 0.0) -> list[Evidence]:
    """What the fix would buy (the volatile window moved after the stable part, or the prefix kept): replayed
    over the recorded block chains where the engine recorded them (analyzers/cache/what_if.py), else estimated."""
    return replay_what_if.what_if(c, passes, mspt, usdpt, pool, prefill_mspt)


def _window(analyzer: SymptomAnalyzer, q: Query, c: Cause, passes: list[PassLoss], share: float, mspt: float,
            usdpt: float, pool: kv_replay.Pool | None = None, prefill: float = 0.0) -> Finding:
    seg = c.passes[0].segment
    base = segment_base(seg)
    cls = max({p.window_class for p in c.passes}, key=lambda k: sum(1 for p in c.passes if p.window_class == k))
    offsets = [p.char_offset for p in c.passes if p.char_offset is not None]
    off = max(set(offsets), key=offsets.count) if offsets else None
    gl = [p.global_offset for p in c.passes if p.global_offset is not None]
    tok = int(_median([float(p.token_offset) for p in c.passes if p.token_offset is not None]))
    distinct = len({p.window_text for p in c.passes if p.window_text is not None})
    shuffled = "tools in a different order each call (a set or dict iterated)" if base == "tools" else \
        "segments in a different order each call (shuffled examples)"
    what = {"reordered": shuffled, "field": "a changing field",
            "invisible": "invisible characters", "whitespace": "changing whitespace",
            "free_text": "changing text"}.get(cls) or _a(cls)
    name = segment_name(base)
    where = f"at char {off} of the {name}" if off is not None else f"in the {name}"
    hit_deploys = {p.deploy for p in c.passes}
    if len({p.deploy for p in passes}) > 1 and len(hit_deploys) == 1 and None not in hit_deploys:
        where += f" since deploy {next(iter(hit_deploys))}"  # it shipped with that deploy
    estimated = not all(p.cached_known for p in c.passes)  # no cached tokens recorded: from the prompts alone
    width = fixed = 0
    if cls == "block":  # retrieved notes, a profile: content that changes every call, ahead of fixed text
        width = int(_median([float(p.window_chars) for p in c.passes]))
        fixed = int(_median([p.run_tokens for p in c.passes]))
        what = f"a changing block of ~{width} chars (retrieved notes, per-user data) ahead of ~{fixed} tokens of fixed text"
        values = [p.value_class for p in c.passes if p.value_class]
        if len(values) * 2 > len(c.passes):  # a value (an epoch, a uuid) with the user's fixed text behind it
            value = max(set(values), key=values.count)
            what = _a(value)
            where += f" (ahead of ~{fixed} tokens of fixed text)"
    title = (f"{what[0].upper() + what[1:]} {where} → the cache stops at token {'~' if estimated else ''}{tok} → "
             f"{share:.0%} of prompt tokens re-prefilled")
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    ev = _loss_evidence(c, passes, share, mspt, usdpt)
    # the segment named as the headline names it ("the system prompt"), its key beside it for SQL
    place = f"at char {off} of" if off is not None else "in"  # no pass placed the window inside its segment
    ev.insert(0, Evidence("volatile window", f"{cls} {place} the {name} (segment '{seg}')", "", ids))
    if gl:
        ev.insert(1, Evidence("its offset from the start of the prompt", int(_median([float(x) for x in gl])), "chars", ids))
    ev.insert(2, Evidence("first prompt token the cache missed", tok, "tokens", ids))
    if cls == "block":
        ev.insert(3, Evidence("size of the changing block (median)", width, "chars", ids))
        ev.insert(4, Evidence("fixed text after it, recurring in every pass (median)", fixed, "tokens", ids))
    if estimated:
        ev.append(Evidence("cached tokens", "not recorded by the instrumentation: the first missed token and the "
                           "loss are estimated from the prompts", "", ids))
    sample = next((p.window_text for p in reversed(c.passes) if p.window_text), None)
    if sample is not None:
        ev.append(Evidence("text in the window (one pass)", repr(sample), "", ids[:1]))
    if distinct > 1:
        ev.append(Evidence("distinct values seen in the window", distinct, "", ids))
    ev += what_if(c, passes, mspt, usdpt, pool, prefill)
    stages = (S.INTAKE_SYSTEM_PROMPT, S.CACHE_PREFIX_MATCH) if base == "system" else \
        (S.INTAKE_CONTEXT_ORDERING, S.CACHE_PREFIX_MATCH) if cls == "reordered" else (S.CACHE_PREFIX_MATCH,)
    if cls == "block" and S.INTAKE_CONTEXT_ORDERING not in stages:
        stages = (*stages, S.INTAKE_CONTEXT_ORDERING)  # where the app puts what it retrieved
    stage, cause = S.CACHE_PREFIX_MATCH, window_cause(seg)
    if cls in ("invisible", "whitespace"):
        # characters nobody can see made prompts that look alike differ: the cause is normalization
        stage, cause, stages = S.INTAKE_NORMALIZATION, "invisible-chars", (S.INTAKE_NORMALIZATION, *stages)
    fix = ("Keep the examples in one fixed order" if cls == "reordered" else
           f"Move the changing block after the fixed text: put the fixed instructions first in the {name} and the "
           "retrieved or per-user content after them (the end of the system prompt, or the last user message), so "
           "every call shares the instructions as a cached prefix" if cls == "block" else
           f"Move the {cls if cls not in ('field', 'free_text') else 'changing value'} after the stable part of the "
           "prompt (the end of the last message) or drop it")
    return analyzer.finding(
        stage, _severity(share), title,
        f"{len(c.passes)} of {len(passes)} passes share text with an earlier prompt beyond a window that changes "
        f"({what} in the {name}); the cache stops at the window, so everything after it is prefilled again.",
        ev, ids, f"{fix}; then `llmtrace check` should show the hit rate rise.",
        min(1.0, 0.4 + share), cause=cause, stages=stages, loss_tokens=c.lost_tokens,
        loss_ms=mspt * c.lost_tokens, loss_usd=usdpt * c.lost_tokens, affected_share=len(c.passes) / len(passes))


def _engine(analyzer: SymptomAnalyzer, q: Query, c: Cause, passes: list[PassLoss], share: float, mspt: float,
            usdpt: float, pool: kv_replay.Pool | None = None, prefill: float = 0.0) -> Finding | None:
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    ev = _loss_evidence(c, passes, share, mspt, usdpt)
    common = dict(loss_tokens=c.lost_tokens, loss_ms=mspt * c.lost_tokens, loss_usd=usdpt * c.lost_tokens,
                  affected_share=len(c.passes) / len(passes))
    if c.key == "engine:replica":
        pol = q.one(f"""SELECT {_attr_policy()} AS policy, count(DISTINCT {_attr_replica()}) AS replicas
                        FROM {q.spans} WHERE stage = '{S.ARRIVAL_REPLICA_SELECTION}'""")
        policy = pol.get("policy") or "unknown"
        ev.insert(0, Evidence("passes whose shared prefix was cached on another replica", len(c.passes), "", ids))
        ev.append(Evidence("replica policy", policy, "", ids))
        ev += what_if(c, passes, mspt, usdpt, pool, prefill)
        return analyzer.finding(
            S.ARRIVAL_REPLICA_SELECTION, _severity(share),
            f"Replica routing ({policy}) sends prompts away from the replica that caches their prefix",
            f"{len(c.passes)} passes shared a long prefix with an earlier prompt that another replica served, so "
            "they prefilled it again on theirs.",
            ev, ids, "Route by prefix (prefix_aware replica selection) or pin a session to one replica.",
            min(1.0, 0.45 + share), cause="engine:replica", stages=(S.ARRIVAL_REPLICA_SELECTION, S.CACHE_PREFIX_MATCH),
            **common)
    ev.insert(0, Evidence("passes that missed a prefix an earlier prompt on the same replica had", len(c.passes), "", ids))
    return analyzer.finding(
        S.CACHE_EVICTION, _severity(share), "The engine did not reuse a prefix it had served before (evicted before reuse)",
        f"{len(c.passes)} passes repeated a prefix that an earlier pass on the same replica had, yet it was not in "
        "the cache when they arrived.",
        ev, ids, "Compare cache.eviction (blocks evicted, pressure) and the KV pool size; check the prefix cache is on.",
        min(1.0, 0.35 + share), cause="engine:evicted", stages=(S.CACHE_PREFIX_MATCH, S.CACHE_EVICTION),
        **common)


def _off(analyzer: SymptomAnalyzer, q: Query, c: Cause, passes: list[PassLoss], share: float, mspt: float,
         usdpt: float, pool: kv_replay.Pool | None = None, prefill: float = 0.0) -> Finding | None:
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    return analyzer.finding(
        S.CACHE_PREFIX_MATCH, _severity(share), f"The prefix cache is off: {len(c.passes)} passes prefilled every token",
        "The engine reports its prefix cache disabled, so no prompt reuses what an earlier one computed.",
        [Evidence("passes with the prefix cache off", len(c.passes), f"of {len(passes)}", ids),
         *_loss_evidence(c, passes, share, mspt, usdpt)[1:]], ids,
        "Turn prefix caching on in the engine (it is on by default in llmtrace serve).", min(1.0, 0.4 + share),
        cause="engine:off", loss_tokens=c.lost_tokens, loss_ms=mspt * c.lost_tokens, loss_usd=usdpt * c.lost_tokens,
        affected_share=len(c.passes) / len(passes))


def _short(analyzer: SymptomAnalyzer, q: Query, c: Cause, passes: list[PassLoss], share: float, mspt: float,
           usdpt: float, pool: kv_replay.Pool | None = None, prefill: float = 0.0) -> Finding | None:
    n = len(c.passes)
    if n < max(MIN_PASSES, 0.5 * len(passes)):
        return None
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    med = int(_median([float(p.prompt_tokens) for p in c.passes]))
    return analyzer.finding(
        S.CACHE_PREFIX_MATCH, "info",
        f"{n} of {len(passes)} prompts are shorter than the minimum cacheable prefix (median {med} tokens)",
        "These prompts are below what the engine or provider can usefully cache (it reuses whole KV blocks; "
        "the hosted providers nothing under 1,024 tokens), so a low hit rate on them is expected, not a miss.",
        [Evidence("prompts under the minimum cacheable prefix", n, f"of {len(passes)}", ids),
         Evidence("median prompt tokens", med, "tokens", ids)], ids,
        "Nothing to fix unless a longer shared prefix (instructions, tools) could be put first.",
        0.35, cause="short-prompts", affected_share=n / len(passes))


def _blind(analyzer: SymptomAnalyzer, q: Query, c: Cause, passes: list[PassLoss], share: float, mspt: float,
           usdpt: float, pool: kv_replay.Pool | None = None, prefill: float = 0.0) -> Finding | None:
    """Prompts prefilled again with no prompt content on record: reported, not blamed (info)."""
    n = len(c.passes)
    if n < max(MIN_PASSES, 0.5 * len(passes)):
        return None
    ids = sample_ids([p.trace_id for p in reversed(c.passes)])
    uncached = sum(p.prompt_tokens - p.cached_tokens for p in c.passes)
    prompt = sum(p.prompt_tokens for p in c.passes)
    return analyzer.finding(
        S.CACHE_PREFIX_MATCH, "info",
        f"{n} of {len(passes)} prompts prefilled {uncached / max(1, prompt):.0%} of their tokens again; "
        "no prompt content on record to say why",
        "The instrumentation recorded token counts but no prompt text or segments, so the cache analysis cannot "
        "tell a volatile field (a timestamp, an id) from prompts that simply differ.",
        [Evidence("passes that reused little of an earlier prompt's prefix", n, f"of {len(passes)}", ids),
         Evidence("prompt tokens prefilled on them", uncached, "tokens", ids, baseline=float(prompt))], ids,
        "Turn on the instrumentation's prompt capture (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY "
        "for openai-v2, TRACELOOP_TRACE_CONTENT=true for OpenLLMetry, OPENINFERENCE_HIDE_INPUTS unset, LiteLLM's "
        "message logging on); the collector keeps only keyed hashes of it unless --capture full, and diagnose then "
        "names the field.", 0.4, cause="blind-prefill", affected_share=n / len(passes))


def _attr_policy() -> str:
    return f"mode({attr(N.REPLICA_POLICY)})"


def _attr_replica() -> str:
    return attr(N.REPLICA_ID)
