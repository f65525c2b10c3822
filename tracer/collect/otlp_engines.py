"""Inference engines' and routers' own spans, mapped onto stages: one table row per span shape.

Shapes (each project's span names; attribute spellings are the rows of :data:`SPANS`, several a value
where versions differ):

- vLLM's and SGLang's request span ``llm_request`` with ``gen_ai.latency.*`` (vLLM V0 and SGLang in seconds,
  vLLM V1 in nanoseconds, the unit told from the span: otlp_names.seconds_scale): the pass, and the
  admission, prefill and decode rows its numbers imply (:func:`request_latencies`).
- vLLM V1's request-lifecycle child spans (vllm-project/vllm PR 44402): ``vllm_queue`` -> arrival.admission,
  ``vllm_async_kv_transfer`` (WAITING_FOR_REMOTE_KV) -> cache.host_offload with source remote,
  ``vllm_prefill`` / ``vllm_decode`` -> forward.prefill / forward.decode. ``vllm_step_execution`` is one
  span per forward step shared by the batch: kept, named, no stage (a stage is one row a pass).
- Alibaba ARMS's engine trace, ``llm_request`` -> ``wait``, ``kv_transfer``, ``prefill``, ``decode``: the same
  stages. These bare names are mapped only on a span that carries a ``gen_ai.*`` attribute (an app's own
  ``decode`` span stays the app's).
- NVIDIA Dynamo (ai-dynamo/dynamo PR 9543): ``engine.generate`` with ``disagg_role``, ``input_tokens``,
  ``ttft_ms``, ``output_tokens``, ``finish_reason`` is the engine's pass (a ``prefill`` role's span is the
  forward.prefill of a disaggregated pass, not a pass of its own); ``router.route_request`` is
  arrival.replica_selection.
- llm-d (one trace from gateway to engine): ``llm_d.epp.scoring`` -> arrival.replica_selection, with the
  prompt's blocks and the best endpoint's match from ``produce_precise_prefix_cache`` (``total_blocks``,
  ``max_match_blocks``) and the chosen endpoint's from the ``llm_d.epp.scorer.<type>`` spans;
  ``llm_d.kv_cache.index`` (``lookup.cache_hit``, ``blocks_found``) -> cache.prefix_match;
  ``pick_disagg_profile`` says whether the pair is disaggregated; ``llm_d.pd_proxy.true_ttft_ms`` is a TTFT
  spelling (otlp_names). ``gateway.request_orchestration`` is kept, named.

Every row says it was observed through a mapping (``llmtrace.observed``, ``llmtrace.mapped_from`` = the
source shape). Where a request span and its own phase spans both arrive, each stage is written once
(:class:`PhaseLedger`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from llmtrace.tracer.collect.otlp_names import number, seconds_scale
from llmtrace.tracer.collect.otlp_rows import Mapped, as_stage, stage_row
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.registry.finish_reason import normalize_finish_reason

Kind = Literal["int", "float", "str", "bool", "ms"]


@dataclass(frozen=True, slots=True)
class Field:
    """One value a shape carries: its spellings (the first present wins), our name, and how it is read."""

    keys: tuple[str, ...]
    name: str
    kind: Kind = "int"


@dataclass(frozen=True, slots=True)
class SpanShape:
    source: str  # llmtrace.mapped_from
    stage: str | None  # the stage the span is (None: kept and named, no stage)
    fields: tuple[Field, ...] = ()
    duration_as: str | None = None  # the value the span's own length fills, in ms
    constants: tuple[tuple[str, object], ...] = ()
    needs_genai: bool = False  # a bare name (ARMS's "decode"): only with a gen_ai.* attribute beside it


_QUEUE = (Field(("vllm.queue_depth", "queue_depth", "num_waiting_reqs"), N.ADMISSION_QUEUE_DEPTH),
          Field(("vllm.num_running_reqs", "num_running_reqs"), N.ADMISSION_RUNNING))
_PREFILL = (Field(("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "vllm.num_prompt_tokens",
                   "num_prompt_tokens", "num_computed_tokens"), N.PREFILL_TOKENS),
            Field(("vllm.num_chunks", "num_chunks"), N.PREFILL_CHUNKS))
_DECODE = (Field(("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "vllm.num_generation_tokens",
                  "num_output_tokens"), N.DECODE_STEPS),)
_KV = (Field(("vllm.num_blocks", "num_blocks", "kv_transfer.blocks", "blocks"), N.OFFLOAD_BLOCKS_IN),
       Field(("vllm.kv_bytes", "kv_transfer.bytes", "bytes"), N.OFFLOAD_BYTES))
_REMOTE = ((N.OFFLOAD_SOURCE, "remote"),)

# The router's facts, wherever in its spans they are: chosen endpoint, blocks the chosen and the best held.
# llm-d's own names first (its telemetry semconv package: llm_d.epp.picker.* on pick_endpoints,
# llm_d.epp.producer.* on produce_precise_prefix_cache, llm_d.epp.profile_handler.*); llm-d names no
# endpoint's own match, only the best (max_match_blocks): the chosen one's comes from a scorer that says it,
# or is read off the engine's cached tokens by the analyzer (routed_away.py, with block_tokens).
_ROUTER = (
    Field(("llm_d.epp.picker.top_endpoints", "llm_d.epp.target_endpoint", "llm_d.epp.selected_endpoint",
           "worker_id", "dynamo.worker_id", "router.worker_id", "instance_id", "target_endpoint"),
          N.REPLICA_ID, "str"),
    Field(("llm_d.epp.picker.candidate_endpoints", "llm_d.epp.scoring.candidate_endpoints",
           "llm_d.epp.producer.candidate_endpoints", "llm_d.epp.candidates", "candidates", "num_workers"),
          N.REPLICA_CANDIDATES),
    Field(("llm_d.epp.target_match_blocks", "target_match_blocks", "overlap_blocks", "router.overlap_blocks"),
          N.REPLICA_EXPECTED_HIT_BLOCKS),
    Field(("llm_d.epp.producer.max_match_blocks", "max_match_blocks", "best_overlap_blocks",
           "max_overlap_blocks"), N.REPLICA_BEST_HIT_BLOCKS),
    Field(("max_match_endpoint", "llm_d.epp.max_match_endpoint", "best_worker_id"), N.REPLICA_BEST_ID, "str"),
    Field(("overlap_blocks_lost", "blocks_lost"), N.REPLICA_BLOCKS_LOST),
    Field(("llm_d.epp.producer.total_blocks", "total_blocks", "isl_blocks"), N.REPLICA_TOTAL_BLOCKS),
    Field(("disagg_role", "llm_d.epp.profile_handler.selected_profile", "llm_d.epp.scheduling.profile.name",
           "profile"), N.REPLICA_ROLE, "str"),
    Field(("kv_block_size", "block_size"), N.REPLICA_BLOCK_TOKENS),
)
_ROUTER_STAGE = (N.REPLICA_POLICY, "prefix_aware"),
_ROLE = next(f for f in _ROUTER if f.name == N.REPLICA_ROLE)
# a scoring span that names the chosen endpoint itself writes the row; llm-d's names it on pick_endpoints
_CHOSEN = frozenset(k for f in _ROUTER if f.name == N.REPLICA_ID for k in f.keys if k.startswith("llm_d.epp.")
                    and not k.startswith("llm_d.epp.picker."))

SGLANG_STAGED = (("prefill_waiting", S.ARRIVAL_ADMISSION, N.ADMISSION_QUEUE_WAIT_MS),
                 ("decode_waiting", S.ARRIVAL_ADMISSION, N.ADMISSION_QUEUE_WAIT_MS),
                 ("prefill_forward", S.FORWARD_PREFILL, N.PREFILL_MS))
SGLANG_KEPT = ("decode_loop", "decode_forward", "chunked_prefill", "request_process", "api_server_dispatch",
               "dc_dispatch", "dpc_dispatch", "prefill_prepare", "prefill_bootstrap", "prefill_transfer_kv_cache",
               "decode_prepare", "decode_bootstrap", "decode_transferred", "mini_lb_launch", "wait_pd_finish")

SPANS: dict[str, SpanShape] = {
    # vLLM V1 request-lifecycle spans (PR 44402)
    "vllm_queue": SpanShape("vllm-v1", S.ARRIVAL_ADMISSION, _QUEUE, N.ADMISSION_QUEUE_WAIT_MS),
    "vllm_async_kv_transfer": SpanShape("vllm-v1", S.CACHE_HOST_OFFLOAD, _KV, N.OFFLOAD_MS, _REMOTE),
    "vllm_prefill": SpanShape("vllm-v1", S.FORWARD_PREFILL, _PREFILL, N.PREFILL_MS),
    "vllm_decode": SpanShape("vllm-v1", S.FORWARD_DECODE, _DECODE, N.DECODE_MS),
    "vllm_step_execution": SpanShape("vllm-v1", None),
    # Alibaba ARMS's engine spans
    "wait": SpanShape("arms", S.ARRIVAL_ADMISSION, _QUEUE, N.ADMISSION_QUEUE_WAIT_MS, needs_genai=True),
    "kv_transfer": SpanShape("arms", S.CACHE_HOST_OFFLOAD, _KV, N.OFFLOAD_MS, _REMOTE, needs_genai=True),
    "prefill": SpanShape("arms", S.FORWARD_PREFILL, _PREFILL, N.PREFILL_MS, needs_genai=True),
    "decode": SpanShape("arms", S.FORWARD_DECODE, _DECODE, N.DECODE_MS, needs_genai=True),
    # Dynamo's router (its engine.generate is a pass: dynamo_generate below)
    "router.route_request": SpanShape("dynamo", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE),
    # llm-d: the picker writes the row (it ends last); a scoring span that names the chosen endpoint itself
    # writes it instead (map_engine_span), one row a trace and profile either way
    "pick_endpoints": SpanShape("llm-d", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE),
    "llm_d.epp.scoring": SpanShape("llm-d", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE),
    "llm_d.kv_cache.index": SpanShape("llm-d", S.CACHE_PREFIX_MATCH, (
        Field(("llm_d.kv_cache.lookup.blocks_found", "llm_d.kv_cache.blocks_found", "blocks_found",
               "lookup.blocks_found"), N.PREFIX_HIT_BLOCKS),
        Field(("llm_d.kv_cache.index.lookup.block_count", "llm_d.kv_cache.block_keys.count", "total_blocks",
               "lookup.total_blocks"), N.PREFIX_TOTAL_BLOCKS),
        Field(("llm_d.kv_cache.lookup.cache_hit", "lookup.cache_hit", "cache_hit"), N.PREFIX_ENABLED, "bool"),
    ), constants=((N.PREFIX_SOURCE, "router_index"),)),
    "gateway.request_orchestration": SpanShape("llm-d", None),
    # SGLang's request-trace slices (sglang srt/tracing/req_time_stats.py RequestStage; docs/references/
    # production_request_trace.md), children of a thread span under the request span (`` Req <rid[:8]>``):
    # the wait for the first forward is the queue, the prefill forward the prefill; the writer puts these
    # two under the request span, in place of the rows its numbers implied (otlp_sglang.py). decode_loop /
    # decode_forward end once a decode step (the request's decode is its numbers' row), chunked_prefill
    # once a chunk: kept, named, no stage, as the dispatch, bootstrap and KV-transfer slices.
    **{name: SpanShape("sglang", stage, (), ms) for name, stage, ms in SGLANG_STAGED},
    **{name: SpanShape("sglang", None) for name in SGLANG_KEPT},
    "produce_precise_prefix_cache": SpanShape("llm-d", None),
    "pick_disagg_profile": SpanShape("llm-d", None),
}
# Spans that feed the router's row of the same trace (they end before the span that writes it).
_ROUTER_FEEDERS = frozenset({"produce_precise_prefix_cache", "pick_disagg_profile", "llm_d.kv_cache.index"})
SCORER_PREFIX = "llm_d.epp.scorer."
KV_CACHE_PREFIX = "llm_d.kv_cache."  # the KV-cache manager's spans: tokens and block keys give the block size
DYNAMO_ENGINE = "engine.generate"


def is_engine_span(name: str) -> bool:
    return name in SPANS or name == DYNAMO_ENGINE or name.startswith((SCORER_PREFIX, KV_CACHE_PREFIX))


def _read(v: object, kind: Kind) -> object:
    """One attribute's value as a field of ``kind`` reads it, or None."""
    if kind == "str":
        if isinstance(v, (list, tuple)):  # a list of endpoints, best first (llm-d's picker.top_endpoints)
            v = v[0] if v else None
        return str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else None
    if kind == "bool":
        return v if isinstance(v, bool) else (v.lower() == "true" if isinstance(v, str) else None)
    n = number(v)
    if n is None or n < 0:
        return None
    return n if kind in ("float", "ms") else int(n)


_INDEXES: dict[int, dict[str, tuple[int, Field]]] = {}  # by the id of a module-level fields tuple (hashing
# the tuple of dataclasses on every span cost more than the lookup it saved)


def _index(fields: tuple[Field, ...]) -> dict[str, tuple[int, Field]]:
    """Each spelling of a shape's fields -> (its rank among the field's spellings, the field)."""
    index = _INDEXES.get(id(fields))
    if index is None:
        index = _INDEXES[id(fields)] = {key: (rank, f) for f in fields for rank, key in enumerate(f.keys)}
    return index


def _fields(raw: dict[str, object], fields: tuple[Field, ...], out: dict[str, object]) -> None:
    """The shape's values the span carries, the first spelling of each that reads (a walk over the span's
    few attributes, not over every spelling of the table)."""
    index = _index(fields)
    found: dict[str, tuple[int, object]] = {}
    for key, v in raw.items():
        hit = index.get(key)
        if hit is None or v is None:
            continue
        rank, f = hit
        value = _read(v, f.kind)
        if value is not None and (f.name not in found or rank < found[f.name][0]):
            found[f.name] = (rank, value)
    for name, (_, value) in found.items():
        out.setdefault(name, value)


class PhaseLedger:
    """Which stages each engine request already has a row for, so a request span's implied rows and the
    engine's own phase spans (children of it) give one row a stage, whichever arrives first. Keyed by the
    request span's id; bounded (the oldest requests are forgotten: a phase span arriving after that many
    others is written again, never lost). Also the router facts a trace's earlier spans carried."""

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        self._stages: OrderedDict[str, set[str]] = OrderedDict()
        self._router: OrderedDict[str, dict[str, object]] = OrderedDict()

    def claim(self, request_span: str | None, stage: str) -> bool:
        """True when ``stage`` of this request had no row yet (and now has)."""
        if request_span is None:
            return True
        seen = self._stages.get(request_span)
        if seen is None:
            seen = self._stages[request_span] = set()
            if len(self._stages) > self.limit:
                self._stages.popitem(last=False)
        if stage in seen:
            return False
        seen.add(stage)
        return True

    def router_facts(self, trace: str) -> dict[str, object]:
        facts = self._router.get(trace)
        if facts is None:
            facts = self._router[trace] = {}
            if len(self._router) > self.limit:
                self._router.popitem(last=False)
        return facts


def map_engine_span(name: str, attrs: dict[str, object], a: dict[str, object], trace_hex: str, span_hex: str,
                    parent_hex: str | None, start_ns: int, end_ns: int, ledger: PhaseLedger) -> Mapped | None:
    """Map one engine or router span (``a``: its attributes, content already protected); None when the name
    is one of the bare ARMS names on a span that is not an engine's."""
    if name == DYNAMO_ENGINE:
        return dynamo_generate(attrs, a, start_ns, end_ns)
    if name.startswith(SCORER_PREFIX) or (name.startswith(KV_CACHE_PREFIX) and name not in SPANS):
        # a scorer's verdict (the chosen endpoint's match, where one says it), the KV-cache manager's token
        # and block-key counts (the block size): facts for the router's row
        facts = ledger.router_facts(trace_hex)
        _fields(attrs, _ROUTER, facts)
        _block_tokens(attrs, facts)
        a[N.MAPPED_FROM] = "llm-d"
        return Mapped(None, None, None, a)
    shape = SPANS[name]
    if shape.needs_genai and not any(k.startswith("gen_ai.") for k in attrs):
        return None
    a[N.MAPPED_FROM] = shape.source
    if name in _ROUTER_FEEDERS:
        facts = ledger.router_facts(trace_hex)
        if name != "llm_d.kv_cache.index":
            _fields(attrs, _ROUTER, facts)
        _block_tokens(attrs, facts)
    if shape.stage is None or (name == "llm_d.epp.scoring" and _CHOSEN.isdisjoint(attrs)):
        if shape.stage is not None:  # the picker after it names the endpoint and writes the row
            _fields(attrs, _ROUTER, ledger.router_facts(trace_hex))
        return Mapped(None, None, None, a)
    if shape.stage == S.ARRIVAL_REPLICA_SELECTION and shape.source == "llm-d":
        role = _value(attrs, _ROLE) or ledger.router_facts(trace_hex).get(N.REPLICA_ROLE)
        if not ledger.claim(f"{trace_hex}/router/{role or ''}", shape.stage):
            return Mapped(None, None, None, a)  # this pick's row is written (one a trace and profile)
    if shape.stage != S.ARRIVAL_REPLICA_SELECTION and not ledger.claim(parent_hex, shape.stage):
        a[N.STAGE_COUNTED_IN] = shape.stage  # the request span's numbers already gave this stage its row
        return Mapped(None, None, None, a)
    a[N.OBSERVED] = True
    _fields(attrs, shape.fields, a)
    for key, value in shape.constants:
        a.setdefault(key, value)
    if shape.duration_as is not None:
        a.setdefault(shape.duration_as, max(end_ns - start_ns, 0) / 1e6)
    if shape.stage == S.ARRIVAL_ADMISSION:
        a.setdefault(N.ADMISSION_DECISION, "queued" if end_ns > start_ns else "admitted")
    elif shape.stage == S.ARRIVAL_REPLICA_SELECTION:
        _router_row(a, ledger.router_facts(trace_hex))
    return as_stage(shape.stage, a)


def _value(raw: dict[str, object], f: Field) -> object:
    """One field's value from the span, its first spelling that reads."""
    for key in f.keys:
        v = raw.get(key)
        if v is not None:
            value = _read(v, f.kind)
            if value is not None:
                return value
    return None


def _block_tokens(attrs: dict[str, object], facts: dict[str, object]) -> None:
    """Tokens a block, where a KV-cache span counts both (llm_d.kv_cache.token_count over block_keys.count)."""
    tokens, keys = number(attrs.get("llm_d.kv_cache.token_count")), number(attrs.get("llm_d.kv_cache.block_keys.count"))
    if tokens and keys and tokens >= keys > 0:
        facts.setdefault(N.REPLICA_BLOCK_TOKENS, int(round(tokens / keys)))


def _router_row(a: dict[str, object], facts: dict[str, object]) -> None:
    """The chosen and the best replica's expected prefix, from this span and the trace's earlier router
    spans; blocks lost where both are known; tokens where the block size is."""
    for key, value in facts.items():
        a.setdefault(key, value)
    chosen, best = a.get(N.REPLICA_EXPECTED_HIT_BLOCKS), a.get(N.REPLICA_BEST_HIT_BLOCKS)
    if isinstance(chosen, int) and isinstance(best, int):
        a.setdefault(N.REPLICA_BLOCKS_LOST, max(best - chosen, 0))
    size = a.get(N.REPLICA_BLOCK_TOKENS)
    if isinstance(size, int) and size > 0 and isinstance(chosen, int):
        a.setdefault(N.REPLICA_EXPECTED_HIT_TOKENS, chosen * size)


def dynamo_generate(attrs: dict[str, object], a: dict[str, object], start_ns: int, end_ns: int) -> Mapped:
    """Dynamo's ``engine.generate``: the engine's pass; a prefill worker's is the forward.prefill of a
    disaggregated pass (the decode worker's span is the pass), with the TTFT it measured."""
    a[N.MAPPED_FROM] = "dynamo"
    a[N.SIDE] = "server"
    inp, out = number(attrs.get("input_tokens")), number(attrs.get("output_tokens"))
    model = attrs.get("model")
    if isinstance(model, str):
        a.setdefault(N.GEN_AI_REQUEST_MODEL, model)
        a.setdefault(N.GEN_AI_RESPONSE_MODEL, model)
    reason = attrs.get("finish_reason")
    if isinstance(reason, str) and reason:
        a.setdefault(N.GEN_AI_RESPONSE_FINISH_REASONS, [reason])
        a.setdefault(N.FINISH_REASON, normalize_finish_reason([reason]))
    if attrs.get("disagg_role") == "prefill":
        a[N.OBSERVED] = True
        if inp is not None:
            a.setdefault(N.PREFILL_TOKENS, int(inp))
        a.setdefault(N.PREFILL_MS, max(end_ns - start_ns, 0) / 1e6)
        return as_stage(S.FORWARD_PREFILL, a)
    if inp is not None:
        a.setdefault(N.GEN_AI_USAGE_INPUT_TOKENS, int(inp))
    if out is not None:
        a.setdefault(N.GEN_AI_USAGE_OUTPUT_TOKENS, int(out))
    a.setdefault(N.GEN_AI_PROVIDER_NAME, "dynamo")
    a[N.GEN_AI_OPERATION_NAME] = "chat"
    return Mapped("chat", None, None, a)


# ── the request span's latency breakdown (vLLM, SGLang, ARMS's llm_request) ───────────────────────────────
LATENCY_KEYS = ("gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token",
                "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
                "gen_ai.latency.e2e", "gen_ai.latency.time_in_scheduler", "gen_ai.latency.time_in_model_forward",
                "gen_ai.latency.time_in_model_execute")


def request_latencies(attrs: dict[str, object], span_hex: str, start_ns: int, end_ns: int, mapped: Mapped,
                      ledger: PhaseLedger, source: str) -> None:
    """The admission, prefill and decode rows a request span's ``gen_ai.latency.*`` numbers imply (the span
    starts at arrival; queue, prefill and decode follow one another), in the unit the span's numbers are
    in, each written unless the engine's own phase span for it was (PhaseLedger)."""
    a = mapped.attributes
    raw = {k: number(v) for k in LATENCY_KEYS if (v := attrs.get(k)) is not None}
    present = [v for v in raw.values() if v is not None and v >= 0]
    scale, unit = seconds_scale(present, (end_ns - start_ns) / 1e9 if end_ns > start_ns else 0.0)

    def sec(key: str) -> float | None:
        v = raw.get(key)
        return v * scale if v is not None and 0 <= v * scale <= 1e7 else None

    queue_s, prefill_s, decode_s = (sec("gen_ai.latency.time_in_queue"), sec("gen_ai.latency.time_in_model_prefill"),
                                    sec("gen_ai.latency.time_in_model_decode"))
    output = number(a.get(N.GEN_AI_USAGE_OUTPUT_TOKENS))
    tpot_ms = decode_s * 1000.0 / (output - 1) if decode_s is not None and output and output > 1 else None
    if tpot_ms is not None:
        a.setdefault(N.TPOT_MS, tpot_ms)
    if queue_s is not None:
        a.setdefault(N.ADMISSION_QUEUE_WAIT_MS, queue_s * 1000.0)
    a[N.MAPPED_FROM] = source
    a[N.LATENCY_UNIT] = unit  # the unit its gen_ai.latency.* numbers were in (vLLM V1: ns; V0, SGLang: s)
    src = {N.OBSERVED: True, N.MAPPED_FROM: source}
    t = start_ns
    if queue_s is not None:
        t_end = min(t + int(queue_s * 1e9), end_ns) if end_ns >= t else t
        if ledger.claim(span_hex, S.ARRIVAL_ADMISSION):
            mapped.extra.append(stage_row(span_hex, S.ARRIVAL_ADMISSION, t, t_end, {
                **src, N.ADMISSION_QUEUE_WAIT_MS: queue_s * 1000.0,
                N.ADMISSION_DECISION: "queued" if queue_s > 0 else "admitted"}))
        t = t_end
    if prefill_s is not None:
        t_end = min(t + int(prefill_s * 1e9), max(end_ns, t))
        if ledger.claim(span_hex, S.FORWARD_PREFILL):
            mapped.extra.append(stage_row(span_hex, S.FORWARD_PREFILL, t, t_end,
                                          {**src, N.PREFILL_MS: prefill_s * 1000.0}))
        t = t_end
    if decode_s is not None:
        t_end = min(t + int(decode_s * 1e9), max(end_ns, t))
        values: dict[str, object] = {**src, N.DECODE_MS: decode_s * 1000.0}
        if output is not None and output > 0:
            values[N.DECODE_STEPS] = int(output) - 1  # the first token comes out of prefill
        if tpot_ms is not None:
            values[N.DECODE_TPOT_MS] = tpot_ms
        if ledger.claim(span_hex, S.FORWARD_DECODE):
            mapped.extra.append(stage_row(span_hex, S.FORWARD_DECODE, t, t_end, values))
