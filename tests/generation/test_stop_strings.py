"""Stop strings on decoded text: straddling tokens, never emitting a partial match, with the real model."""

from __future__ import annotations

import pytest
from generation_helpers import chat_prompt, generate
from hypothesis import given, settings
from hypothesis import strategies as st

from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.generation.stop_strings import StopStringMatcher


def feed_all(stops, pieces):
    m = StopStringMatcher(stops)
    out = []
    hit = False
    for p in pieces:
        text, hit = m.feed(p)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(m.flush())
    return m, out, hit


def test_straddling_stop_string():
    m, out, hit = feed_all(("STOP",), ["hello S", "T", "OP and more"])
    assert hit and m.matched == "STOP"
    assert "".join(out) == "hello "
    assert out == ["hello ", "", ""]  # "S" and "ST" were held back, never emitted
    assert m.holdback_max == 2


def test_false_alarm_is_released():
    m, out, hit = feed_all(("STOP",), ["a ST", "ART"])
    assert not hit
    assert "".join(out) == "a START"
    assert out[0] == "a "  # "ST" held back until it could no longer be a stop string


def test_earliest_of_several_stops_wins():
    m, out, hit = feed_all(("world", "lo w"), ["hello world"])
    assert hit and m.matched == "lo w" and "".join(out) == "hel"


def test_empty_stop_rejected():
    with pytest.raises(ValueError):
        StopStringMatcher(("",))


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet="abc日😀", max_size=30),
    st.lists(st.text(alphabet="abc日😀", min_size=1, max_size=3), min_size=1, max_size=3),
    st.lists(st.integers(1, 5), min_size=1, max_size=10),
)
def test_emitted_text_is_exactly_the_prefix_before_the_first_stop(text, stops, cuts):
    pieces, i, k = [], 0, 0
    while i < len(text):
        c = cuts[k % len(cuts)]
        pieces.append(text[i:i + c])
        i += c
        k += 1
    m, out, hit = feed_all(tuple(stops), pieces)
    # oracle: the stream stops after the first piece that completes some stop string, cut at the earliest
    # stop string present by then (a longer stop that began earlier but is not complete yet does not count)
    seen, expected = "", None
    for piece in pieces:
        seen += piece
        hits = [seen.find(s) for s in stops if s in seen]
        if hits:
            expected = seen[: min(hits)]
            break
    if expected is not None:
        assert hit
        assert "".join(out) == expected
    else:
        assert not hit and "".join(out) == text
    # no emitted prefix ever contains a stop string
    emitted = ""
    for piece in out:
        emitted += piece
        assert not any(s in emitted for s in stops)


@pytest.mark.slow
def test_stop_string_straddling_real_tokens(model, tokenizer, pipe):
    """Greedy reply of the real model, stopped on a string that spans two of its tokens."""
    prompt = chat_prompt(tokenizer, "What is the capital of France?")
    free, _ = generate(model, pipe, SamplingParams(temperature=0.0, max_tokens=12), prompt)
    # pick a stop string that straddles the boundary between two emitted tokens
    pieces = [tokenizer.decode([t]) for t in free.output_token_ids]
    j = next(j for j in range(1, len(pieces)) if len(pieces[j - 1].strip()) >= 2 and len(pieces[j].strip()) >= 2)
    stop = pieces[j - 1][-2:] + pieces[j][:2]
    stopped, deltas = generate(model, pipe, SamplingParams(temperature=0.0, max_tokens=12, stop=(stop,)), prompt)
    expected = free.text[: free.text.find(stop)]
    assert stopped.finish_reason == "stop"
    assert stopped.text == expected
    assert stop not in stopped.text
    assert len(stopped.output_token_ids) == j + 1  # stopped on the token that completed it
    values = pipe.stage_values(stopped)
    # hashes mode keeps no stop-string text: its class, length and keyed hash (the text with capture=full only)
    assert values["gen.stop"]["llmtrace.stop.matched"] is None
    assert values["gen.stop"]["llmtrace.stop.string_chars"] == len(stop)
    assert values["gen.stop"]["llmtrace.stop.kind"] == "stop_string" and values["gen.stop"]["llmtrace.stop.string_hash"]
    assert values["gen.detokenization"]["llmtrace.detok.stop_holdback_chars"] >= 2
