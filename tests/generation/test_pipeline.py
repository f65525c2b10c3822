"""The pipeline seam: stop decisions, flushing, streaming timings and the Generation stages' values."""

from __future__ import annotations

import time

import pytest
import torch

from llmtrace.backend.generation.params import Constraint, ReasoningConfig, SamplingParams
from llmtrace.tracer.registry.stages import get_stage

OWN_STAGES = ["gen.penalties", "gen.sampling", "gen.constrained", "gen.reasoning_budget", "gen.stop",
              "gen.detokenization", "gen.streaming"]


def feed(pipe, st, ids, start_ns=0, step_ns=1_000_000):
    results = []
    for n, tok in enumerate(ids):
        results.append(pipe.accept(st, tok, start_ns + (n + 1) * step_ns))
        if results[-1].finished:
            break
    return results


# values of these stages that others record: the engine's emitter (when the first text left the engine,
# which the pipeline cannot see), and what the registry says only the client middleware writes (by=("C",))
FROM_ENGINE_EMITTER = {"llmtrace.detok.first_text_delay_ms"}


def _client_only(stage_id: str) -> set[str]:
    return {v.name for v in get_stage(stage_id).values if v.by and "B" not in v.by}


def test_every_registered_value_present_with_the_right_type(pipe, tokenizer):
    params = SamplingParams(temperature=0.7, seed=1, max_tokens=5, stop=("zz",),
                            constraint=Constraint("regex", "[a-z]+"), reasoning=ReasoningConfig(budget=4))
    st = pipe.new_state(params, [1])
    feed(pipe, st, tokenizer.encode("hello world"))
    values = pipe.stage_values(st)
    assert set(values) == set(OWN_STAGES)
    for stage_id in OWN_STAGES:
        stage = get_stage(stage_id)
        for bv in stage.values:
            value = values[stage_id].get(bv.name)
            if value is None:
                continue  # e.g. no seed requested
            assert bv.accepts(value), (stage_id, bv.name, value)
        missing = {bv.name for bv in stage.values} - set(values[stage_id]) - FROM_ENGINE_EMITTER - _client_only(stage_id)
        assert not missing, (stage_id, missing)
        written = set(values[stage_id]) & _client_only(stage_id)
        assert not written, (stage_id, written)  # a value the registry calls client-only, written by the pipeline


def test_eos_stops_and_is_not_emitted(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(max_tokens=50), [1])
    res = feed(pipe, st, tokenizer.encode("Hi there") + [2, 42])
    assert res[-1].finished and res[-1].finish_reason == "stop"
    assert st.text == "Hi there" and st.output_token_ids[-1] == 2
    assert pipe.stage_values(st)["gen.stop"]["llmtrace.stop.matched"] == "<|im_end|>"
    assert pipe.accept(st, 5, 0).finished  # a finished sequence stays finished


def test_ignore_eos_and_stop_token_ids(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(max_tokens=50, ignore_eos=True, stop_token_ids=(0,)), [1])
    res = feed(pipe, st, tokenizer.encode("a") + [2] + tokenizer.encode("b") + [0] + tokenizer.encode("c"))
    assert res[-1].finish_reason == "stop"
    assert st.text == "ab"  # EOS passed through (special, skipped from text), token 0 stopped it
    assert pipe.stage_values(st)["gen.stop"]["llmtrace.stop.matched"] == "<|endoftext|>"


def test_max_tokens_is_length(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(max_tokens=3), [1])
    res = feed(pipe, st, tokenizer.encode("one two three four five"))
    assert len(res) == 3 and res[-1].finish_reason == "length"
    v = pipe.stage_values(st)["gen.stop"]
    assert v["gen_ai.response.finish_reasons"] == ["length"] and v["gen_ai.usage.output_tokens"] == 3
    assert v["gen_ai.request.max_tokens"] == 3


def test_length_cut_mid_character_flushes_held_bytes(pipe, tokenizer):
    ids = tokenizer.encode("😀")
    st = pipe.new_state(SamplingParams(max_tokens=len(ids) - 1), [1])
    res = feed(pipe, st, ids)
    assert res[-1].finish_reason == "length"
    assert st.text == "\ufffd"  # the half emoji can only be shown as a replacement, and it is counted
    assert pipe.stage_values(st)["gen.detokenization"]["llmtrace.detok.replacement_chars"] == 1


def test_finish_on_abort_releases_held_stop_prefix(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(max_tokens=50, stop=("STOP",)), [1])
    feed(pipe, st, tokenizer.encode("wait ST"))
    assert st.text == "wait "  # "ST" could be the start of STOP
    res = pipe.finish(st)
    assert res.text_delta == "ST" and res.finished and st.text == "wait ST"
    assert pipe.finish(st).text_delta == ""


def test_stream_timings_from_the_given_clock(pipe, tokenizer):
    st = pipe.new_state(SamplingParams(max_tokens=50), [1], arrival_ns=0)
    ids = tokenizer.encode("one two three four five six")
    for n, tok in enumerate(ids):
        pipe.accept(st, tok, 100_000_000 + n * (10_000_000 if n % 2 else 30_000_000))
    v = pipe.stage_values(st)["gen.streaming"]
    assert v["llmtrace.stream.chunks"] == len(ids)
    assert v["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.1)
    assert 10 <= v["llmtrace.stream.itl_p50_ms"] <= 30
    assert v["llmtrace.stream.itl_p99_ms"] >= v["llmtrace.stream.itl_p50_ms"]


def test_deltas_concatenate_to_text(pipe):
    st = pipe.new_state(SamplingParams(temperature=1.0, seed=5, max_tokens=40, stop=("e",)), [1])
    g = torch.Generator().manual_seed(5)
    deltas = []
    while not st.finished:
        tok = pipe.sample(torch.randn(1, pipe.vocab_size, generator=g), [st])[0]
        deltas.append(pipe.accept(st, tok, time.time_ns()).text_delta)
    assert "".join(deltas) == st.text and "e" not in st.text


def test_stage_durations_are_recorded(pipe):
    st = pipe.new_state(SamplingParams(temperature=1.0, seed=0, max_tokens=5, frequency_penalty=0.1,
                                       constraint=Constraint("regex", "[a-z]+")), [1])
    g = torch.Generator().manual_seed(0)
    while not st.finished:
        pipe.accept(st, pipe.sample(torch.randn(1, pipe.vocab_size, generator=g), [st])[0], time.time_ns())
    durations = pipe.stage_durations_ns(st)
    assert {"gen.penalties", "gen.constrained", "gen.sampling", "gen.detokenization"} <= set(durations)
    assert all(v > 0 for v in durations.values())


def test_padded_vocabulary_rows_never_chosen(tokenizer):
    from llmtrace.backend.generation.pipeline import GenerationPipeline

    pipe = GenerationPipeline(tokenizer, eos_token_ids={2}, vocab_size=tokenizer.vocab_size)
    logits = torch.zeros(1, tokenizer.vocab_size + 64)
    logits[0, -1] = 100.0  # a padding row with a huge score
    st = pipe.new_state(SamplingParams(temperature=0.0), [1])
    assert pipe.sample(logits, [st])[0] < tokenizer.vocab_size


def test_logprobs_follow_accepted_tokens(pipe):
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2] + [0.0] * (pipe.vocab_size - 3)]).clamp_min(1e-30))
    st = pipe.new_state(SamplingParams(temperature=0.0, max_tokens=3, logprobs=2), [1])
    tok = pipe.sample(logits, [st])[0]
    pipe.accept(st, tok, 0)
    assert len(st.logprobs) == 1 and st.logprobs[0].token_id == 0
    assert st.logprobs[0].logprob == pytest.approx(float(torch.log(torch.tensor(0.5))), abs=1e-4)
    assert [t for t, _ in st.logprobs[0].top] == [0, 1]
    # speculative verification: entries only for the tokens that were really accepted
    draft = [0, 5]
    targets = pipe.sample_draft_targets(st, logits.repeat(3, 1), draft)
    assert targets == [0, 0]
    for t in targets:
        pipe.accept(st, t, 0)
    assert [lp.token_id for lp in st.logprobs] == st.output_token_ids
    plain = pipe.new_state(SamplingParams(temperature=0.0), [1])
    pipe.accept(plain, pipe.sample(logits, [plain])[0], 0)
    assert plain.logprobs == []
