"""Each engine stage's own time (``llmtrace.stage.self_ms``) checked against an independent clock: the
caller timing ``engine.step()`` from outside. The engine's stages must account for the engine's share of the
pass, and their time before the first token for the prefill the caller saw, each within 10%."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import duckdb

import llmtrace
from llmtrace.backend.engine import EngineRequest
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.tracer import recording as rec


def test_stage_self_times_match_the_callers_clock(make_engine, tmp_path: Path) -> None:  # noqa: ANN001
    db = tmp_path / "self.duckdb"
    llmtrace.init(db=db, service_name="self-time", strict=True)
    try:
        engine = make_engine(num_blocks=128, block_size=16, max_prefill_chunk=48)
        rng = random.Random(5)
        prompt = [rng.randrange(300, 40000) for _ in range(190)]  # four prefill chunks
        for rid in ("warm-up", "a"):  # the first pass pays one-time costs (lazy imports, first emission)
            ps = rec.start_pass("tiny-llama", side="server")
            params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
            added = time.time_ns()
            engine.add_request(EngineRequest(rid, prompt if rid == "a" else prompt[::-1], params, pass_span=ps))
            first_token_at = last_at = 0
            while engine.has_unfinished():
                outputs = engine.step()
                now = time.time_ns()
                if any(o.new_token_ids for o in outputs) and not first_token_at:
                    first_token_at = now
                if outputs:
                    last_at = now
            ps.end()
    finally:
        llmtrace.shutdown()
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT stage, attributes FROM spans WHERE parent_span_id = ? AND stage IS NOT NULL",
                       [ps.span_id]).fetchall()
    own = {stage: json.loads(a).get("llmtrace.stage.self_ms") for stage, a in rows}
    before_first = {stage: json.loads(a).get("llmtrace.stage.ttft_ms") for stage, a in rows}
    assert all(v is not None for v in own.values()), own  # every engine stage carries its own time
    engine_ms = sum(own.values())
    # the caller's clock also holds the recording of the pass, done after its time was charged
    caller_ms = (last_at - added - engine.last_emit_ns) / 1e6
    assert abs(engine_ms - caller_ms) <= 0.10 * caller_ms, (engine_ms, caller_ms, own)
    prefill_ms = sum(before_first.values())
    caller_prefill_ms = (first_token_at - added) / 1e6
    assert abs(prefill_ms - caller_prefill_ms) <= 0.10 * caller_prefill_ms, (prefill_ms, caller_prefill_ms)
    # the forward pass dominates a pass on this model; attention and the FFN are measured, not enveloped
    assert own["forward.attention"] > 0 and own["forward.feed_forward"] > 0
    assert own["forward.attention"] + own["forward.feed_forward"] < engine_ms
