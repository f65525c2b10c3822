"""Inference engines' and routers' own spans, mapped onto stages: one table row per span shape.

Shapes (each project's span names; attribute spellings are the rows of :data:`SPANS`, several a value
where versions differ; the file each name was read from is named beside it):

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
- NVIDIA Dynamo (ai-dynamo/dynamo, read in its source): the frontend's ``http-request`` root
  (lib/llm/src/http/service: request_id, x_request_id, ttft_ms, prefill_worker_id / decode_worker_id) is
  kept, named; ``router.route_request`` (lib/runtime/src/pipeline/network/egress/push_router.rs: request_id,
  worker_id, router_mode; written for every mode but KV) and, in KV mode, ``kv_router.route_request``
  (lib/llm/src/kv_router: request_id, worker_id, dp_rank, overlap_blocks = the chosen worker's overlap,
  phase) are arrival.replica_selection, fed by ``kv_router.find_matches`` (block_count, block_size);
  ``engine.generate`` (disagg_role agg / prefill / decode, model, input_tokens: tests/frontend/
  test_unified_worker_otlp_export.py; ttft_ms, output_tokens, finish_reason: PR 9543) is the engine's pass
  (a ``prefill`` role's span is the forward.prefill of a disaggregated pass). Dynamo's spans name the
  chosen worker's overlap only: the best worker's is a metric (router_overlap_blocks_lost), not a span value.
- llm-d (llm-d/llm-d-router; the span and key names changed between its releases, both are read): the
  gateway's ``gateway.request_orchestration`` (pkg/epp/requestcontrol/director.go) is kept, named;
  ``run_scheduler_profile`` (pkg/epp/scheduling/scheduler.go, ``llm_d.epp.scheduling.profile.name``) holds
  ``llm_d.epp.scoring`` / ``scoring`` -> ``llm_d.epp.scorer.<type>`` and ``pick_endpoints``
  (pkg/epp/scheduling/scheduler_profile.go: ``llm_d.epp.picker.top_endpoints``, the candidates by weighted
  score, best first), which writes the arrival.replica_selection row with the prompt's blocks and the best
  endpoint's match from ``produce_precise_prefix_cache`` (.../dataproducer/preciseprefixcache/producer.go:
  ``llm_d.epp.producer.total_blocks`` / ``max_match_blocks``); the KV-cache index lookup ``index_lookup``
  (pkg/kvcache/kvblock/traced_index.go; ``llm_d.kv_cache.index`` in llm-d-kv-cache) with
  ``llm_d.kv_cache.lookup.cache_hit`` / ``blocks_found`` -> cache.prefix_match; ``score_tokens``
  (pkg/kvcache/indexer.go: ``llm_d.kv_cache.token_count`` / ``block_keys.count``, the block size);
  ``pick_pd_profile`` / ``pick_disagg_profile`` name the profile run next
  (``llm_d.epp.profile_handler.selected_profile``); ``llm_d.pd_proxy.true_ttft_ms`` is a TTFT spelling
  (otlp_names). The keys are llm-d's semconv package (pkg/common/observability/semconv/llm_d.go). llm-d
  names no endpoint's own match, only the best.

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

Kind = Literal["int", "float", "str", "bool", "ms", "role"]


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
    # a bare name ("decode", ARMS's; "scoring", llm-d's): only with an attribute of this prefix beside it
    needs: str | None = None


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
# Each field's spellings: the projects' own first (llm-d's semconv keys, pkg/common/observability/semconv/
# llm_d.go; Dynamo's span fields, lib/llm/src/kv_router and lib/runtime/.../push_router.rs), then spellings
# no project was seen to write (kept for routers of one's own: target_match_blocks, best_overlap_blocks,
# best_worker_id, ...). llm-d names no endpoint's own match, only the best (max_match_blocks): the analyzer
# reads the chosen one's off the engine's cached tokens. Dynamo names only the chosen one's (overlap_blocks),
# and nothing on its spans gives the best (docs/integrations/engines.md: a metric and a DEBUG log line).
_ROUTER = (
    Field(("llm_d.epp.picker.top_endpoints", "worker_id",
           "llm_d.epp.target_endpoint", "llm_d.epp.selected_endpoint", "dynamo.worker_id", "router.worker_id",
           "instance_id", "target_endpoint"), N.REPLICA_ID, "str"),
    Field(("llm_d.epp.picker.candidate_endpoints", "llm_d.epp.scoring.candidate_endpoints",
           "llm_d.epp.producer.candidate_endpoints", "llm_d.epp.candidates", "candidates", "num_workers"),
          N.REPLICA_CANDIDATES),
    Field(("overlap_blocks", "llm_d.epp.target_match_blocks", "target_match_blocks", "router.overlap_blocks"),
          N.REPLICA_EXPECTED_HIT_BLOCKS),
    Field(("llm_d.epp.producer.max_match_blocks", "max_match_blocks", "best_overlap_blocks",
           "max_overlap_blocks"), N.REPLICA_BEST_HIT_BLOCKS),
    Field(("max_match_endpoint", "llm_d.epp.max_match_endpoint", "best_worker_id"), N.REPLICA_BEST_ID, "str"),
    Field(("overlap_blocks_lost", "blocks_lost"), N.REPLICA_BLOCKS_LOST),
    Field(("llm_d.epp.producer.total_blocks", "block_count", "total_blocks", "isl_blocks"), N.REPLICA_TOTAL_BLOCKS),
    Field(("phase", "disagg_role", "llm_d.epp.profile_handler.selected_profile",
           "llm_d.profile_handler.selected_profile", "llm_d.epp.scheduling.profile.name", "profile"),
          N.REPLICA_ROLE, "role"),
    Field(("block_size", "kv_block_size"), N.REPLICA_BLOCK_TOKENS),
)
_ROUTER_STAGE = (N.REPLICA_POLICY, "prefix_aware"),
_ROLE = next(f for f in _ROUTER if f.name == N.REPLICA_ROLE)
# a scoring span that names the chosen endpoint itself writes the row; llm-d's names it on pick_endpoints
_CHOSEN = frozenset(k for f in _ROUTER if f.name == N.REPLICA_ID for k in f.keys if k.startswith("llm_d.epp.")
                    and not k.startswith("llm_d.epp.picker."))
# Dynamo's router_mode (a Rust enum written with {:?}) as the policy our own router names
_DYNAMO_POLICY = {"RoundRobin": "round_robin", "LeastLoaded": "least_loaded", "KV": "prefix_aware",
                  "Random": "random", "PowerOfTwoChoices": "power_of_two_choices", "Direct": "direct",
                  "DeviceAwareWeighted": "device_aware_weighted"}
_LLMD = "llm_d."  # the prefix of every llm-d key: a bare llm-d span name is llm-d's only beside one

SGLANG_STAGED = (("prefill_waiting", S.ARRIVAL_ADMISSION, N.ADMISSION_QUEUE_WAIT_MS),
                 ("decode_waiting", S.ARRIVAL_ADMISSION, N.ADMISSION_QUEUE_WAIT_MS),
                 ("prefill_forward", S.FORWARD_PREFILL, N.PREFILL_MS))
SGLANG_KEPT = ("decode_loop", "decode_forward", "chunked_prefill", "request_process", "api_server_dispatch",
               "dc_dispatch", "dpc_dispatch", "prefill_prepare", "prefill_bootstrap", "prefill_transfer_kv_cache",
               "decode_prepare", "decode_bootstrap", "decode_transferred", "mini_lb_launch", "wait_pd_finish")
_LLMD_INDEX = SpanShape("llm-d", S.CACHE_PREFIX_MATCH, (
    Field(("llm_d.kv_cache.lookup.blocks_found", "llm_d.kv_cache.blocks_found", "blocks_found",
           "lookup.blocks_found"), N.PREFIX_HIT_BLOCKS),
    Field(("llm_d.kv_cache.index.lookup.block_count", "llm_d.kv_cache.lookup.block_count",
           "llm_d.kv_cache.block_keys.count", "total_blocks", "lookup.total_blocks"), N.PREFIX_TOTAL_BLOCKS),
    Field(("llm_d.kv_cache.lookup.cache_hit", "lookup.cache_hit", "cache_hit"), N.PREFIX_ENABLED, "bool"),
), constants=((N.PREFIX_SOURCE, "router_index"),), needs=_LLMD)
_LLMD_SCORING = SpanShape("llm-d", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE, needs=_LLMD)

SPANS: dict[str, SpanShape] = {
    # vLLM V1 request-lifecycle spans (PR 44402)
    "vllm_queue": SpanShape("vllm-v1", S.ARRIVAL_ADMISSION, _QUEUE, N.ADMISSION_QUEUE_WAIT_MS),
    "vllm_async_kv_transfer": SpanShape("vllm-v1", S.CACHE_HOST_OFFLOAD, _KV, N.OFFLOAD_MS, _REMOTE),
    "vllm_prefill": SpanShape("vllm-v1", S.FORWARD_PREFILL, _PREFILL, N.PREFILL_MS),
    "vllm_decode": SpanShape("vllm-v1", S.FORWARD_DECODE, _DECODE, N.DECODE_MS),
    "vllm_step_execution": SpanShape("vllm-v1", None),
    # Alibaba ARMS's engine spans
    "wait": SpanShape("arms", S.ARRIVAL_ADMISSION, _QUEUE, N.ADMISSION_QUEUE_WAIT_MS, needs="gen_ai."),
    "kv_transfer": SpanShape("arms", S.CACHE_HOST_OFFLOAD, _KV, N.OFFLOAD_MS, _REMOTE, needs="gen_ai."),
    "prefill": SpanShape("arms", S.FORWARD_PREFILL, _PREFILL, N.PREFILL_MS, needs="gen_ai."),
    "decode": SpanShape("arms", S.FORWARD_DECODE, _DECODE, N.DECODE_MS, needs="gen_ai."),
    # Dynamo's routers (its engine.generate is a pass: dynamo_generate below): router.route_request in every
    # mode but KV (its policy from router_mode), kv_router.route_request in KV mode; kv_router.find_matches
    # (the prompt's blocks and the block size) ends before it; the frontend's http-request root is kept
    "router.route_request": SpanShape("dynamo", S.ARRIVAL_REPLICA_SELECTION, _ROUTER),
    "kv_router.route_request": SpanShape("dynamo", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE),
    "kv_router.find_matches": SpanShape("dynamo", None),
    **{name: SpanShape("dynamo", None) for name in ("kv_router.select_worker", "kv_router.schedule",
                                                     "kv_router.compute_block_hashes", "kv_router.compute_seq_hashes")},
    "http-request": SpanShape("dynamo", None, needs="request_id"),
    # llm-d: the picker writes the row (it ends last); a scoring span that names the chosen endpoint itself
    # writes it instead (map_engine_span), one row a scheduler profile run either way
    "pick_endpoints": SpanShape("llm-d", S.ARRIVAL_REPLICA_SELECTION, _ROUTER, constants=_ROUTER_STAGE),
    "llm_d.epp.scoring": _LLMD_SCORING,
    "scoring": _LLMD_SCORING,  # the name in llm-d's span registry (semconv/registry/spans.yaml)
    "llm_d.kv_cache.index": _LLMD_INDEX,  # llm-d-kv-cache
    "index_lookup": _LLMD_INDEX,  # llm-d-router pkg/kvcache/kvblock/traced_index.go
    "gateway.request_orchestration": SpanShape("llm-d", None),
    **{name: SpanShape("llm-d", None, needs=_LLMD) for name in (
        "run_scheduler_profile", "filter_endpoints", "score_prefix_cache", "score_tokens", "compute_scores",
        "index_add", "index_evict", "prepare_disaggregation", "forward_request")},
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
    "pick_pd_profile": SpanShape("llm-d", None),
}
# Spans that feed the router's row of the same trace (they end before the span that writes it).
_ROUTER_FEEDERS = frozenset({"produce_precise_prefix_cache", "llm_d.kv_cache.index", "index_lookup", "score_tokens",
                             "kv_router.find_matches"})
# The profile handler names the profile it runs next: the picks after it are that profile's (latest wins)
_PROFILE_PICKERS = frozenset({"pick_disagg_profile", "pick_pd_profile"})
_LLMD_INDEX_NAMES = frozenset({"llm_d.kv_cache.index", "index_lookup"})
SCORER_PREFIX = "llm_d.epp.scorer."
KV_CACHE_PREFIX = "llm_d.kv_cache."  # the KV-cache manager's spans: tokens and block keys give the block size
DYNAMO_ENGINE = "engine.generate"


def is_engine_span(name: str) -> bool:
    return name in SPANS or name == DYNAMO_ENGINE or name.startswith((SCORER_PREFIX, KV_CACHE_PREFIX))


def _read(v: object, kind: Kind) -> object:
    """One attribute's value as a field of ``kind`` reads it, or None."""
    if kind in ("str", "role"):
        if isinstance(v, (list, tuple)):  # a list of endpoints, best first (llm-d's picker.top_endpoints)
            v = v[0] if v else None
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            return None
        return str(v).lower() if kind == "role" else str(v)  # a role: Dynamo's phase is written Prefill
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
    if shape.needs is not None and not any(k.startswith(shape.needs) for k in attrs):
        return None  # a bare name (ARMS's "decode", llm-d's "scoring") on a span that is not theirs
    a[N.MAPPED_FROM] = shape.source
    if name in _ROUTER_FEEDERS or name in _PROFILE_PICKERS:
        _feed_router(name, attrs, ledger.router_facts(trace_hex))
    if shape.stage is None or (shape is _LLMD_SCORING and _CHOSEN.isdisjoint(attrs)):
        if shape.stage is not None:  # the picker after it names the endpoint and writes the row
            _fields(attrs, _ROUTER, ledger.router_facts(trace_hex))
        return Mapped(None, None, None, a)
    if shape.stage == S.ARRIVAL_REPLICA_SELECTION and shape.source == "llm-d":
        # one row a scheduler profile run: the picker and the scoring span are children of one
        # run_scheduler_profile span (a disaggregated request runs two: prefill and decode)
        run = parent_hex or _value(attrs, _ROLE) or ledger.router_facts(trace_hex).get(N.REPLICA_ROLE)
        if not ledger.claim(f"{trace_hex}/router/{run or ''}", shape.stage):
            return Mapped(None, None, None, a)  # this run's row is written
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
        mode = attrs.get("router_mode")  # Dynamo's push router in a mode other than KV
        if isinstance(mode, str):
            a.setdefault(N.REPLICA_POLICY, _DYNAMO_POLICY.get(mode, mode.lower()))
        _router_row(a, ledger.router_facts(trace_hex))
    return as_stage(shape.stage, a)


def _feed_router(name: str, attrs: dict[str, object], facts: dict[str, object]) -> None:
    """A span that ends before the router's row of its trace: its facts kept for that row (the prompt's
    blocks, the best endpoint's match, the block size); a profile handler's choice replaces the role before
    it, the picks after it run that profile."""
    if name in _PROFILE_PICKERS:
        role = _value(attrs, _ROLE)
        if role is not None:
            facts[N.REPLICA_ROLE] = role
        return
    if name not in _LLMD_INDEX_NAMES:  # an index lookup's blocks_found is its own row (cache.prefix_match)
        _fields(attrs, _ROUTER, facts)
    _block_tokens(attrs, facts)


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
