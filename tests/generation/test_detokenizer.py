"""Incremental detokenization: hold back partial UTF-8, never emit U+FFFD mid-stream for real tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmtrace.backend.generation.detokenizer import IncrementalDetokenizer

MULTIBYTE = ["😀🎉👩‍👩‍👧 party", "東京は日本の首都です。", "Ελληνικά και русский текст", "mixed 🇯🇵 日本 ok"]


def stream(tokenizer, ids, skip=True):
    d = IncrementalDetokenizer(tokenizer.token_bytes, tokenizer.special_ids, skip_special_tokens=skip)
    deltas = [d.push(i) for i in ids]
    deltas.append(d.flush())
    return d, deltas


@pytest.mark.parametrize("text", MULTIBYTE)
def test_real_tokens_stream_without_replacement(tokenizer, text):
    ids = tokenizer.encode(text)
    d, deltas = stream(tokenizer, ids)
    assert "".join(deltas) == text
    assert all("\ufffd" not in x for x in deltas)
    assert d.replacement_chars == 0
    assert d.held_back_max > 0  # something really was split across tokens


def test_naive_per_token_decode_would_mangle(tokenizer):
    """The failure the hold-back prevents: decoding each token alone shows U+FFFD."""
    ids = tokenizer.encode("😀")
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)


def test_special_tokens_skipped_or_kept(tokenizer):
    ids = tokenizer.encode("<|im_start|>assistant\nhi<|im_end|>")
    assert "".join(stream(tokenizer, ids)[1]) == "assistant\nhi"
    assert "".join(stream(tokenizer, ids, skip=False)[1]) == "<|im_start|>assistant\nhi<|im_end|>"


def test_truly_invalid_bytes_are_counted():
    table = {0: b"ok", 1: b"\xff", 2: b"\xe6\x97", 3: b"x"}
    d = IncrementalDetokenizer(table.__getitem__, frozenset())
    assert d.push(0) == "ok"
    assert d.push(1) == "\ufffd"  # never valid: emitted at once, counted
    assert d.push(2) == ""  # a lead byte + continuation: wait for the third byte
    assert d.held_back == 2
    assert d.push(3) == "\ufffdx"  # the sequence broke off: replaced
    assert d.flush() == ""
    assert d.replacement_chars == 2


def test_flush_releases_an_unfinished_character():
    table = {0: b"\xf0\x9f"}
    d = IncrementalDetokenizer(table.__getitem__, frozenset())
    assert d.push(0) == ""
    assert d.flush() == "\ufffd"
    assert d.replacement_chars == 1


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=30), st.lists(st.integers(1, 6), min_size=1, max_size=40))
def test_any_byte_split_reassembles(text, cuts):
    """Arbitrary splits of valid UTF-8 into 'tokens' always reassemble exactly, with no U+FFFD."""
    data = text.encode("utf-8")
    pieces, i = [], 0
    for c in cuts * (len(data) // max(sum(cuts), 1) + 1):
        if i >= len(data):
            break
        pieces.append(data[i:i + c])
        i += c
    if i < len(data):
        pieces.append(data[i:])
    d = IncrementalDetokenizer(pieces.__getitem__, frozenset())
    out = "".join(d.push(k) for k in range(len(pieces))) + d.flush()
    assert out == text
    assert d.replacement_chars == 0


@pytest.mark.slow
def test_real_model_streams_emoji_and_cjk_without_replacement(model, tokenizer, pipe):
    """The real model, steered by a choice constraint onto multi-byte text, streamed through the engine:
    every delta is whole characters, none is U+FFFD, and bytes really were held back."""
    from generation_helpers import chat_prompt, generate

    from llmtrace.backend.generation.params import Constraint, SamplingParams

    choices = ["東京は日本の首都です 🗼🎌", "こんにちは 😀👍"]
    prompt = chat_prompt(tokenizer, "Say hello in Japanese with an emoji.")
    st, deltas = generate(model, pipe, SamplingParams(temperature=0.0, max_tokens=40,
                                                      constraint=Constraint("choice", choices)), prompt)
    assert st.text in choices
    assert "".join(deltas) == st.text
    assert all("\ufffd" not in d for d in deltas)
    values = pipe.stage_values(st)["gen.detokenization"]
    assert values["llmtrace.detok.replacement_chars"] == 0
    assert values["llmtrace.detok.held_back_max"] >= 1
