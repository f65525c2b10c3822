"""All nine Generation stages (26-34) land once per pass in a real DuckDB store, with values that show
what the pipeline did (constraint, penalties on structured output, tool calls, stream timings)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

import llmtrace
from llmtrace.backend.generation.params import Constraint, ReasoningConfig, SamplingParams
from llmtrace.backend.generation.tool_calls import tool_call_constraint
from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry.stages import STAGES

GENERATION = [s.id for s in STAGES if s.phase == "generation"]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 10}}, "required": ["q"],
    "additionalProperties": False}}}]


def test_generation_stages_once_per_pass(tokenizer, tmp_path: Path):
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.model.llama import LlamaModel

    assert len(GENERATION) == 9
    db = tmp_path / "g.duckdb"
    llmtrace.init(db=db, service_name="generation-test", strict=True)
    requests = {
        "json": SamplingParams(temperature=0.8, seed=1, max_tokens=60, frequency_penalty=0.5,
                               constraint=Constraint("json_schema", {"type": "object", "properties": {
                                   "n": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["n"], "additionalProperties": False})),
        "tool": SamplingParams(temperature=0.8, seed=2, max_tokens=60, constraint=tool_call_constraint(TOOLS, "required")),
        "think": SamplingParams(temperature=0.8, seed=3, max_tokens=12, stop=("zzzz",),
                                reasoning=ReasoningConfig(budget=4)),
    }
    try:
        engine = Engine.from_model(LlamaModel.tiny("float32", seed=0), tokenizer, EngineConfig(num_blocks=64))
        passes = {}
        for rid, params in requests.items():
            passes[rid] = rec.start_pass("tiny-llama", side="server")
            prompt = tokenizer.encode("<think>" if rid == "think" else "Answer:")
            engine.add_request(EngineRequest(rid, prompt, params, pass_span=passes[rid]))
        while engine.has_unfinished():
            engine.step()
        for p in passes.values():
            p.end()
    finally:
        llmtrace.shutdown()

    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT parent_span_id, name, attributes FROM spans").fetchall()
    children: dict[str, dict[str, list[dict]]] = {}
    for parent, name, attrs in rows:
        children.setdefault(parent, {}).setdefault(name, []).append(json.loads(attrs))
    got = {}
    for rid, p in passes.items():
        spans = children[p.span_id]
        for stage_id in GENERATION:
            assert len(spans.get(stage_id, [])) == 1, f"{rid}: {stage_id} x{len(spans.get(stage_id, []))}"
        got[rid] = {k: v[0] for k, v in spans.items()}

    j, t, r = got["json"], got["tool"], got["think"]
    assert j["gen.constrained"]["llmtrace.constraint.kind"] == "json_schema"
    assert j["gen.constrained"]["gen_ai.output.type"] == "json"
    assert j["gen.penalties"]["llmtrace.penalties.on_structured_output"] is True
    assert j["gen.stop"]["gen_ai.response.finish_reasons"] == ["stop"]
    assert t["gen.stop"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert t["gen.penalties"]["llmtrace.penalties.on_structured_output"] is False
    assert r["gen.reasoning_budget"]["llmtrace.reasoning.budget"] == 4
    assert r["gen.reasoning_budget"]["llmtrace.reasoning.forced_close"] is True
    assert r["gen.constrained"]["llmtrace.constraint.kind"] == "none"
    assert r["gen.sampling"]["llmtrace.sampling.effective_temperature"] == 0.8
    assert r["gen.streaming"]["llmtrace.stream.chunks"] >= 1
    assert r["gen.streaming"]["gen_ai.response.time_to_first_chunk"] > 0
    assert r["gen.detokenization"]["llmtrace.detok.skip_special_tokens"] is True
    assert j["gen.stop"]["llmtrace.stop.truncated"] is False
    assert r["gen.stop"]["llmtrace.stop.truncated"] is (r["gen.stop"]["gen_ai.response.finish_reasons"] == ["length"])
    assert t["gen.streaming"]["llmtrace.stream.first_tool_call_ms"] > 0
    assert "llmtrace.stream.first_content_ms" not in t["gen.streaming"]
    assert j["gen.streaming"]["llmtrace.stream.first_content_ms"] > 0
    if "llmtrace.stream.first_content_ms" in r["gen.streaming"]:  # answer text came after the thinking
        assert r["gen.streaming"]["llmtrace.stream.first_content_ms"] > r["gen.streaming"][
            "gen_ai.response.time_to_first_chunk"] * 1e3
    finish = dict(con.execute("SELECT span_id, finish_reason FROM requests").fetchall())
    assert finish[passes["tool"].span_id] == "tool_calls"
