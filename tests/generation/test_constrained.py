"""Constrained decoding with llguidance: output always conforms; compile errors refused; numbers recorded."""

from __future__ import annotations

import json
import re

import pytest
from generation_helpers import chat_prompt, generate, run_random

from llmtrace.backend.generation.params import Constraint, InvalidRequestError, SamplingParams

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def check_person(obj):
    assert set(obj) == {"name", "age", "tags"}
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 12
    assert isinstance(obj["age"], int) and 0 <= obj["age"] <= 150
    assert all(t in ("a", "b") for t in obj["tags"]) and len(obj["tags"]) <= 3


@pytest.mark.parametrize("seed", range(4))
def test_json_schema_always_parses_even_with_random_logits(pipe, seed):
    st = run_random(pipe, SamplingParams(temperature=1.0, seed=seed, max_tokens=200,
                                         constraint=Constraint("json_schema", PERSON)), [1], seed=seed)
    assert st.finish_reason == "stop", st.text
    check_person(json.loads(st.text))
    v = pipe.stage_values(st)["gen.constrained"]
    assert v["llmtrace.constraint.kind"] == "json_schema" and v["gen_ai.output.type"] == "json"
    assert v["llmtrace.constraint.compile_ms"] > 0
    assert 0.5 < v["llmtrace.constraint.masked_fraction"] <= 1.0
    assert v["llmtrace.constraint.forced_tokens"] >= 1  # e.g. the opening '{"name": "'
    assert v["llmtrace.constraint.dead_end"] is False


def test_json_object_regex_choice_grammar(pipe):
    obj = run_random(pipe, SamplingParams(seed=1, max_tokens=100, constraint=Constraint("json_object", None)), [1])
    if obj.finish_reason == "stop":
        assert isinstance(json.loads(obj.text), dict)
    else:  # random logits may keep an object open until max_tokens; it is still a valid prefix
        assert obj.text.startswith("{") and obj.finish_reason == "length"
    rx = run_random(pipe, SamplingParams(seed=2, max_tokens=40, constraint=Constraint("regex", r"[0-9]{3}-[a-z]{2,4}")), [1])
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", rx.text), rx.text
    ch = run_random(pipe, SamplingParams(seed=3, max_tokens=40, constraint=Constraint("choice", ["red", "green", "blue"])), [1])
    assert ch.text in ("red", "green", "blue") and ch.finish_reason == "stop"
    lark = 'start: "(" NUM ("+" NUM)* ")"\nNUM: /[0-9]{1,2}/\n'
    gr = run_random(pipe, SamplingParams(seed=4, max_tokens=40, constraint=Constraint("grammar", lark)), [1])
    assert re.fullmatch(r"\([0-9]{1,2}(\+[0-9]{1,2})*\)", gr.text) or gr.finish_reason == "length", gr.text


def test_after_marker_free_text_then_constrained(pipe, tokenizer):
    """Reason in free text, constrain only what follows the marker."""
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=120,
                            constraint=Constraint("json_schema", PERSON, after_marker="ANSWER:"))
    st = pipe.new_state(params, [1])
    # the "model" writes free text, then the marker, then whatever the logits say (random)
    import time

    import numpy as np
    import torch
    for tok in tokenizer.encode("Let me think about it. ANSWER:"):
        masked, allowed = st.constraint.mask_logits(np.zeros(pipe.vocab_size, dtype=np.float32))
        assert allowed > 40_000  # free text: (almost) nothing masked
        pipe.accept(st, tok, time.time_ns())
    g = torch.Generator().manual_seed(0)
    while not st.finished:
        pipe.accept(st, pipe.sample(torch.randn(1, pipe.vocab_size, generator=g) * 3, [st])[0], time.time_ns())
    head, _, tail = st.text.partition("ANSWER:")
    assert head == "Let me think about it. "
    check_person(json.loads(tail))
    assert st.finish_reason == "stop"


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint("regex", "([a-z"),
        Constraint("grammar", "start: undefined_rule"),
        Constraint("json_schema", "{not json"),
        Constraint("choice", []),
        Constraint("json_schema", {"type": "object"}, after_marker=""),
    ],
)
def test_bad_constraints_refused_before_any_work(pipe, constraint):
    with pytest.raises(InvalidRequestError):
        pipe.new_state(SamplingParams(constraint=constraint), [1])


def test_dead_end_is_recorded(pipe):
    """A grammar whose every continuation is a token the vocabulary cannot spell (a byte it has no token
    for) leaves nothing allowed: the sequence ends and the span says dead_end."""
    st = run_random(pipe, SamplingParams(seed=0, max_tokens=10, constraint=Constraint("regex", "\x04+")), [1])
    assert st.finished and st.finish_reason == "stop"
    v = pipe.stage_values(st)
    assert v["gen.constrained"]["llmtrace.constraint.dead_end"] is True
    assert v["gen.stop"]["llmtrace.stop.matched"] == "constraint_dead_end"


@pytest.mark.slow
def test_real_model_json_schema_output_parses(model, tokenizer, pipe):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    prompt = chat_prompt(tokenizer, "Give the capital of France as JSON with keys city and country.")
    st, deltas = generate(model, pipe, SamplingParams(temperature=0.0, max_tokens=40,
                                                      constraint=Constraint("json_schema", schema)), prompt)
    obj = json.loads(st.text)
    assert set(obj) == {"city", "country"} and all(isinstance(v, str) for v in obj.values())
    assert "".join(deltas) == st.text
    assert st.finish_reason == "stop"


@pytest.mark.parametrize(
    ("constraint", "text"),
    [
        (Constraint("regex", "[a-c]+x", after_marker="ANSWER:"), "hmm ANSWER: abcx"),
        (Constraint("choice", ["yes", "no"], after_marker="ANSWER:"), "hmm ANSWER: no"),
        (Constraint("grammar", 'start: "yes" | "no" NUM\nNUM: /[0-9]+/', after_marker="ANSWER:"), "hmm ANSWER:\nno42"),
        (Constraint("json_object", None, after_marker="A/B (x)"), 'a/b A/B (x) {"a": 1}'),
    ],
)
def test_after_marker_with_every_kind(pipe, tokenizer, constraint, text):
    st = pipe.new_state(SamplingParams(max_tokens=50, constraint=constraint), [1])
    ids = tokenizer.encode(text)
    for tok in ids:
        assert not st.finished
        pipe.accept(st, tok, 0)
    assert st.constraint.accepting and not st.constraint.dead_end
    wrong = pipe.new_state(SamplingParams(max_tokens=50, constraint=constraint), [1])
    for tok in tokenizer.encode(text.split(constraint.after_marker)[0] + constraint.after_marker + " ???"):
        pipe.accept(wrong, tok, 0)
        if wrong.finished:
            break
    assert wrong.constraint.dead_end  # what follows the marker is held to the constraint


def test_filler_only_output_is_a_dead_end(pipe, tokenizer):
    """A grammar that ignores whitespace and a 'model' that only likes whitespace: stopped, flagged."""
    import torch

    lark = 'start: "[" NUM ("," NUM)* "]"\nNUM: /[0-9]+/\n%ignore /[ \\t\\n]+/\n'
    st = pipe.new_state(SamplingParams(temperature=0.0, max_tokens=200, constraint=Constraint("grammar", lark)), [1])
    space = tokenizer.encode(" ")[0]
    import time
    while not st.finished:
        logits = torch.zeros(1, pipe.vocab_size)
        logits[0, space] = 10.0
        pipe.accept(st, pipe.sample(logits, [st])[0], time.time_ns())
    v = pipe.stage_values(st)
    assert v["gen.constrained"]["llmtrace.constraint.dead_end"] is True
    assert v["gen.stop"]["llmtrace.stop.matched"] == "constraint_dead_end"
    assert len(st.output_token_ids) < 40  # stopped long before max_tokens
