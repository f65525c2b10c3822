"""The GGUF-built tokenizer: round trips, raw token bytes, special tokens, chat template, llguidance JSON."""

from __future__ import annotations

import functools
import json

import llguidance
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llmtrace.backend.model.chat_template import ChatTemplateError, render_chat_template

TEXTS = [
    "Hello, world! The quick brown fox jumps over 13 lazy dogs.",
    "emoji: 😀🎉👩‍👩‍👧 and flags 🇫🇷",
    "中文文本，日本語のテキスト、한국어 텍스트",
    "  leading spaces\n\ttabs and\r\nnewlines  ",
    "def f(x):\n    return x ** 2  # ünïcödé",
]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids, text
    assert tokenizer.decode(ids) == text
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")


@functools.lru_cache(maxsize=1)
def _single_bytes(tokenizer) -> frozenset[int]:
    return frozenset(tokenizer.token_bytes(i)[0] for i in range(tokenizer.vocab_size) if len(tokenizer.token_bytes(i)) == 1)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_round_trip_any_text(tokenizer, text):
    # The vocabulary has no token for a few bytes (some C0 controls, lead bytes of planes 4-15), so the
    # model's own tokenizer drops them too; every other text must survive exactly.
    single = _single_bytes(tokenizer)
    assume(all(b in single for b in text.encode("utf-8")))
    ids = tokenizer.encode(text)
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")


def test_known_ids_and_specials(tokenizer):
    assert tokenizer.vocab_size == 49152
    assert tokenizer.eos_token_ids == {2}
    assert tokenizer.bos_token_id == 1
    assert tokenizer.id_to_token(2) == "<|im_end|>"
    assert {0, 1, 2} <= tokenizer.special_ids
    # digits are split one by one (the "smollm" pre-tokenizer), like the model's own tokenizer
    assert len(tokenizer.encode("12345")) == 5
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tokenizer.decode(ids) == "user\nhi"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"


def test_some_token_is_a_partial_utf8_sequence(tokenizer):
    """The detokenizer's hold-back exists because of these: tokens that are not valid UTF-8 alone."""
    pieces = [tokenizer.token_bytes(i) for i in tokenizer.encode("😀")]
    assert len(pieces) > 1
    with pytest.raises(UnicodeDecodeError):
        pieces[0].decode("utf-8")


def test_token_bytes_rejects_out_of_range(tokenizer):
    with pytest.raises(ValueError):
        tokenizer.token_bytes(tokenizer.vocab_size)


def test_chat_template(tokenizer):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    with_system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], add_generation_prompt=False
    )
    assert with_system == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"


def test_chat_template_content_parts_and_override(tokenizer):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    out = tokenizer.apply_chat_template(msgs, template_override="{{ messages[0]['content'] }}|{{ eos_token }}")
    assert out == "ab|<|im_end|>"


def test_chat_template_raise_exception_and_bad_input():
    tpl = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    assert render_chat_template(tpl, [{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="first must be user"):
        render_chat_template(tpl, [{"role": "assistant", "content": "x"}])
    with pytest.raises(ValueError):
        render_chat_template(tpl, [{"content": "no role"}])
    with pytest.raises(ChatTemplateError):
        render_chat_template("{% for %}", [{"role": "user", "content": "x"}])


def test_tojson_keeps_unicode():
    out = render_chat_template("{{ messages[0] | tojson }}", [{"role": "user", "content": "日本"}])
    assert json.loads(out)["content"] == "日本" and "日本" in out


def test_json_feeds_llguidance(tokenizer):
    ll = llguidance.LLTokenizer(tokenizer.to_json(), n_vocab=tokenizer.vocab_size, eos_token=2)
    text = "Hello 😀 日本"
    assert ll.tokenize_str(text) == tokenizer.encode(text)
    assert ll.decode_bytes(tokenizer.encode(text)) == text.encode("utf-8")
