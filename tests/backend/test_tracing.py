"""Every Cache & reuse (12-16) and Forward pass (17-25) stage is recorded once per pass, with its boundary
values, under the pass span, into a real DuckDB store."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
from engine_helpers import greedy, random_prompt, run_all

import llmtrace
from llmtrace.backend.engine import EngineRequest
from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry.stages import STAGES

ENGINE_STAGES = [s.id for s in STAGES if 12 <= s.number <= 25] + ["gen.lm_head", "gen.speculation"]


def test_engine_stages_once_per_pass_with_values(make_engine, tmp_path: Path) -> None:  # noqa: ANN001
    from llmtrace.tracer import health

    db = tmp_path / "t.duckdb"
    llmtrace.init(db=db, service_name="engine-test", strict=True)
    health.reset()
    try:
        rng = random.Random(21)
        shared = random_prompt(rng, 40)
        prompts = {"a": shared + random_prompt(rng, 5), "b": shared + random_prompt(rng, 9)}
        engine = make_engine(num_blocks=64, block_size=16, max_prefill_chunk=16)
        passes = {}
        for rid in ("a", "b"):
            passes[rid] = rec.start_pass("tiny-llama", side="server")
            run_all(engine, [EngineRequest(rid, prompts[rid], greedy(4), pass_span=passes[rid])])
            passes[rid].end()
        assert health.counters().get("wrong_value_type", 0) == 0, health.counters()
    finally:
        llmtrace.shutdown()

    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT span_id, parent_span_id, name, attributes, start_ns, end_ns FROM spans").fetchall()
    by_parent: dict[str, dict[str, list[dict]]] = {}
    for _sid, parent, name, attrs, start, end in rows:
        assert end >= start
        by_parent.setdefault(parent, {}).setdefault(name, []).append(json.loads(attrs))
    values = {}
    for rid, p in passes.items():
        children = by_parent[p.span_id]
        for stage_id in ENGINE_STAGES:
            assert len(children.get(stage_id, [])) == 1, f"{rid}: {stage_id} recorded {len(children.get(stage_id, []))}x"
        values[rid] = {k: v[0] for k, v in children.items()}

    a, b = values["a"], values["b"]
    assert a["cache.prefix_match"]["llmtrace.prefix.hit_tokens"] == 0
    assert b["cache.prefix_match"]["llmtrace.prefix.hit_tokens"] == 32
    assert b["cache.prefix_match"]["gen_ai.usage.cache_read.input_tokens"] == 32
    assert b["cache.prefix_match"]["llmtrace.prefix.first_miss_token"] == 32
    assert len(b["cache.prefix_match"]["llmtrace.prefix.key"]) == 16
    assert b["forward.prefill"]["llmtrace.prefill.tokens"] == len(prompts["b"]) - 32
    assert a["forward.prefill"]["llmtrace.prefill.chunks"] == 3  # 45 tokens in chunks of 16
    assert a["forward.decode"]["llmtrace.decode.steps"] == 3  # 4 tokens: the first comes from prefill
    assert a["cache.kv_write"]["llmtrace.kv.tokens_written"] == len(prompts["a"]) + 3
    assert a["cache.kv_write"]["llmtrace.kv.bytes_per_token"] == 2 * 2 * 2 * 16 * 4
    assert a["cache.block_allocation"]["llmtrace.blocks.allocated"] == 3
    assert a["cache.eviction"]["llmtrace.eviction.policy"] == "lru"
    assert a["cache.host_offload"]["llmtrace.offload.blocks_out"] == 0
    assert a["forward.embedding"]["llmtrace.embedding.tokens"] == len(prompts["a"]) + 3
    assert a["forward.embedding"]["llmtrace.embedding.dtype"] == "float32"
    assert a["forward.positional"]["llmtrace.rope.max_position"] == len(prompts["a"]) + 2
    assert a["forward.positional"]["llmtrace.rope.beyond_trained"] is False
    assert a["forward.attention"]["llmtrace.attention.backend"] == "torch"
    assert a["forward.attention"]["llmtrace.attention.reason"] == "no CUDA device"
    assert a["forward.attention"]["llmtrace.attention.kv_len_max"] == len(prompts["a"]) + 3
    assert "decode=grouped_matmul" in a["forward.attention"]["llmtrace.attention.kernel_path"]
    assert a["forward.attention_variant"]["llmtrace.attention.gqa_ratio"] == 2
    assert a["forward.moe_routing"]["llmtrace.moe.experts"] == 0
    assert a["forward.feed_forward"]["llmtrace.ffn.intermediate_size"] == 128
    assert a["forward.batching"]["llmtrace.batch.size_max"] == 1
    assert a["forward.batching"]["llmtrace.batch.invariant_mode"] is False
    assert a["gen.lm_head"]["llmtrace.lm_head.vocab"] == 49152
    assert a["gen.speculation"]["llmtrace.spec.method"] == "none"
    for stage_id in ("gen.sampling", "gen.stop", "gen.streaming"):  # the generation pipeline's stages
        assert stage_id in by_parent[passes["a"].span_id]

    req = con.execute(
        "SELECT span_id, prompt_tokens, cached_tokens, output_tokens, finish_reason, ttft_ms, temperature "
        "FROM requests ORDER BY start_ns"
    ).fetchall()
    assert [(r[1], r[2], r[3], r[4]) for r in req] == [
        (len(prompts["a"]), 0, 4, "length"),
        (len(prompts["b"]), 32, 4, "length"),
    ]
    assert all(r[5] is not None and r[5] > 0 and r[6] == 0.0 for r in req)


def test_no_pass_span_records_nothing_and_still_works(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=16)
    outs = run_all(engine, [EngineRequest("q", [400, 401, 402], greedy(2))])
    assert outs["q"][-1].finished
