"""Benchmark `generation`: speculation on vs off, and the cost of constrained decoding, on the real model.

- spec_speedup_b1 / spec_speedup_b16: decode throughput with n-gram prompt-lookup speculation over
  throughput without it, greedy, on a prompt that repeats itself; at batch 1 (one user: the win) and at
  batch 16 (a loaded engine: every drafted token is extra work in a batch that is already busy).
- spec_acceptance_rate: accepted over drafted tokens, over both runs with speculation.
- constrained_overhead_ratio: per-token decode time (median step) with a JSON-schema constraint over the
  same without (batch 1, greedy), the two decoding in alternating steps; target <= 1.3. pipeline_ms_per_token_* is all the generation pipeline's
  own work per token (penalties, mask, sampling, detokenization, stops), timed inside it: the part of the
  ratio that is not the machine's noise. constrained_mask_ms_per_token is the pipeline's own share (mask
  computation and application), measured inside the pipeline.

Each configuration runs BENCH_GEN_REPEATS times, interleaved with its counterpart, and the best run counts
(other processes on a shared machine only ever make a run slower). BENCH_GEN_THREADS sets torch's intra-op
threads: on an oversubscribed machine one thread is several times faster than two, because every parallel
region waits for a descheduled worker.

Environment: BENCH_GEN_TOKENS (decode tokens per request, default 64), BENCH_GEN_DTYPE (bfloat16, like
the engine benchmark), BENCH_GEN_REPEATS (2), BENCH_GEN_THREADS (1; 0 keeps torch's default).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402
from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest  # noqa: E402
from llmtrace.backend.generation.params import Constraint, SamplingParams, SpeculationConfig  # noqa: E402
from llmtrace.backend.model.llama import LlamaModel  # noqa: E402
from llmtrace.backend.model.pull import default_model_path  # noqa: E402
from llmtrace.backend.model.tokenizer import Tokenizer  # noqa: E402

TOKENS = int(os.environ.get("BENCH_GEN_TOKENS", "64"))
DTYPE = os.environ.get("BENCH_GEN_DTYPE", "bfloat16")
REPEATS = int(os.environ.get("BENCH_GEN_REPEATS", "2"))
THREADS = int(os.environ.get("BENCH_GEN_THREADS", "1"))

REPEATING = (
    "Copy the following list exactly, line by line, three times.\n"
    + "".join(f"- item {i}: the quick brown fox jumps over the lazy dog number {i}\n" for i in range(1, 7))
)
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "steps": {"type": "array", "items": {"type": "string", "maxLength": 80}, "minItems": 6, "maxItems": 6},
    },
    "required": ["title", "steps"],
    "additionalProperties": False,
}


class Counters:
    """Drafted/accepted tokens, counted at the pipeline's verification call the engine makes."""

    def __init__(self, engine: Engine) -> None:
        self.drafted = 0
        self.accepted = 0
        inner = engine.pipeline.sample_draft_targets

        def counted(state, logits, draft):  # noqa: ANN001, ANN202
            targets = inner(state, logits, draft)
            self.drafted += len(draft)
            self.accepted += len(targets) - 1
            return targets

        engine.pipeline.sample_draft_targets = counted  # type: ignore[method-assign]


def run(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> dict[str, float]:
    """Prefill all, then time decode only: tokens after each request's first one, over the decode window."""
    for i, p in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{time.time_ns()}-{i}", p, params))
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    count: dict[str, int] = {}
    gaps: list[float] = []  # ms per token of each decode step (single request: robust to a noisy machine)
    while engine.has_unfinished():
        outs = engine.step()
        now = time.perf_counter_ns()
        for o in outs:
            n = len(o.new_token_ids)
            if o.request_id not in first:
                first[o.request_id] = now
                count[o.request_id] = n - 1  # the first token belongs to prefill
            else:
                count[o.request_id] += n
                if n:
                    gaps.append((now - last[o.request_id]) / 1e6 / n)
            last[o.request_id] = now
    start = min(first.values())
    end = max(last.values())
    tokens = sum(count.values())
    per_token = [(last[r] - first[r]) / max(count[r], 1) for r in first]
    return {"tok_s": tokens / ((end - start) / 1e9), "tokens": tokens,
            "ms_per_token": sum(per_token) / len(per_token) / 1e6, "median_step_ms": statistics.median(gaps)}


def pipeline_ms(state) -> float:  # noqa: ANN001
    return sum(state.stage_ns.values()) / 1e6 / max(len(state.output_token_ids), 1)


def best(engine_factory, prompts, params, counters_out=None) -> dict[str, float]:  # noqa: ANN001
    """One run on a fresh engine (a cold prefix cache every time)."""
    engine = engine_factory()
    counters = Counters(engine)
    result = run(engine, prompts, params)
    if counters_out is not None:
        counters_out.append(counters)
    return result


def main() -> None:
    if THREADS:
        torch.set_num_threads(THREADS)
    path = default_model_path()
    tokenizer = Tokenizer.from_gguf(path)
    model = LlamaModel.from_gguf(path, DTYPE)
    config = EngineConfig(num_blocks=1024, max_num_seqs=16, dtype=DTYPE)

    def fresh() -> Engine:
        return Engine.from_model(model, tokenizer, config)

    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": REPEATING}]))
    greedy = {"temperature": 0.0, "max_tokens": TOKENS, "ignore_eos": True}
    spec = SpeculationConfig(method="ngram", k=4, ngram_max=3)

    results: dict[str, object] = {"model": path.name, "dtype": DTYPE, "torch_threads": torch.get_num_threads(),
                                  "decode_tokens_per_request": TOKENS, "repeats_best_of": REPEATS,
                                  "load_average_at_start": round(os.getloadavg()[0], 2)}
    run(fresh(), [prompt], SamplingParams(temperature=0.0, max_tokens=8))  # warm up kernels and allocator

    drafted = accepted = 0
    for batch in (1, 16):
        # distinct prompts (a different last line each) so the prefix cache does not turn the batch into one
        prompts = [prompt[:-1] + tokenizer.encode(f" {i}") + prompt[-1:] if batch > 1 else prompt
                   for i in range(batch)]
        tokens = TOKENS if batch == 1 else max(TOKENS // 2, 8)
        plain = SamplingParams(**{**greedy, "max_tokens": tokens})
        speculative = SamplingParams(**{**greedy, "max_tokens": tokens}, speculation=spec)
        offs, ons, counters = [], [], []
        for _ in range(REPEATS):
            offs.append(best(fresh, prompts, plain))
            ons.append(best(fresh, prompts, speculative, counters))
        off = max(offs, key=lambda r: r["tok_s"])
        on = max(ons, key=lambda r: r["tok_s"])
        d = sum(c.drafted for c in counters)
        a = sum(c.accepted for c in counters)
        drafted += d
        accepted += a
        results[f"decode_tok_s_b{batch}_spec_off"] = round(off["tok_s"], 2)
        results[f"decode_tok_s_b{batch}_spec_on"] = round(on["tok_s"], 2)
        results[f"spec_speedup_b{batch}"] = round(on["tok_s"] / off["tok_s"], 3)
        results[f"spec_acceptance_rate_b{batch}"] = round(a / max(d, 1), 3)
    results["spec_acceptance_rate"] = round(accepted / max(drafted, 1), 3)

    ask = tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a recipe for pancakes as JSON with a title and six steps."}]))
    # Paired design: the unconstrained and the constrained request decode on two engines in alternating
    # steps, so both see the same load from the rest of the machine; each side's median step counts.
    free_ms, cons_ms, states, free_states = [], [], [], []
    for _ in range(REPEATS):
        pair = []
        for sink, params in ((free_states, SamplingParams(**greedy)),
                             (states, SamplingParams(**greedy, constraint=Constraint("json_schema", SCHEMA)))):
            engine = fresh()
            new_state = engine.pipeline.new_state
            engine.pipeline.new_state = lambda *a, _n=new_state, _s=sink, **k: _s.append(_n(*a, **k)) or _s[-1]  # type: ignore[method-assign]
            engine.add_request(EngineRequest(f"c{time.time_ns()}", ask, params))
            pair.append((engine, []))
        while any(e.has_unfinished() for e, _ in pair):
            for engine, steps in pair:
                if engine.has_unfinished():
                    t0 = time.perf_counter_ns()
                    engine.step()
                    steps.append((time.perf_counter_ns() - t0) / 1e6)
        free_ms.append(statistics.median(pair[0][1][1:]))  # the first step is the prefill
        cons_ms.append(statistics.median(pair[1][1][1:]))
    free = {"median_step_ms": min(free_ms)}
    constrained = {"median_step_ms": min(cons_ms)}
    st = states[-1]
    mask_ms = min(s.stage_ns.get("gen.constrained", 0) / 1e6 / max(len(s.output_token_ids), 1) for s in states)
    results["decode_ms_per_token_unconstrained"] = round(free["median_step_ms"], 3)
    results["decode_ms_per_token_constrained"] = round(constrained["median_step_ms"], 3)
    results["constrained_overhead_ratio"] = round(constrained["median_step_ms"] / free["median_step_ms"], 3)
    results["constrained_mask_ms_per_token"] = round(mask_ms, 3)
    # everything the pipeline does per token (penalties, mask, sampling, detokenization, stops), measured inside
    results["pipeline_ms_per_token_unconstrained"] = round(min(pipeline_ms(s) for s in free_states), 3)
    results["pipeline_ms_per_token_constrained"] = round(min(pipeline_ms(s) for s in states), 3)
    results["constrained_output_tokens"] = len(st.output_token_ids)
    results["constrained_finish_reason"] = str(st.finish_reason)
    results["constrained_masked_fraction"] = round(st.constraint.masked_fraction_mean, 4) if st.constraint else 0.0
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    save("generation", results)


if __name__ == "__main__":
    main()
