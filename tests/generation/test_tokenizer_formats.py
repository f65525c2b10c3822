"""Tokenizers rebuilt from GGUF files other than the default model's: SentencePiece BPE against llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtrace.backend.generation.detokenizer import IncrementalDetokenizer
from llmtrace.backend.model.tokenizer import Tokenizer

DATA = Path(__file__).resolve().parent / "data"
SPM = DATA / "ggml-vocab-llama-spm.gguf"


def cases(path: Path) -> list[tuple[str, list[int]]]:
    texts = Path(f"{path}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    ids = Path(f"{path}.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, ids, strict=False)]


@pytest.fixture(scope="module")
def spm() -> Tokenizer:
    return Tokenizer.from_gguf(SPM)


def test_sentencepiece_matches_llama_cpp(spm):
    assert spm.kind == "spm" and spm.vocab_size == 32000
    assert spm.bos_token_id == 1 and spm.eos_token_ids == {2} and spm.add_bos
    pairs = cases(SPM)
    assert len(pairs) > 40
    for text, expected in pairs:
        assert spm.encode(text) == expected, text


def test_sentencepiece_round_trip_and_bytes(spm):
    for text in ["Hello world", "emoji 🦙 and 日本語", "  two leading spaces", "tabs\tand\nnewlines"]:
        ids = spm.encode(text)
        assert spm.decode(ids) == text
        # token bytes carry the prefix space SentencePiece adds; otherwise they are the text itself
        assert b"".join(spm.token_bytes(i) for i in ids) == (" " + text).encode("utf-8")
    assert spm.encode("hi", add_special_tokens=True)[0] == 1


def test_sentencepiece_byte_fallback_streams_whole_characters(spm):
    ids = spm.encode("🦙🦙")
    assert any(spm.id_to_token(i).startswith("<0x") for i in ids)  # the emoji is spelled in raw bytes
    d = IncrementalDetokenizer(spm.token_bytes, spm.special_ids)
    deltas = [d.push(i) for i in ids] + [d.flush()]
    assert "".join(deltas) == " 🦙🦙" and all("\ufffd" not in x for x in deltas)


def test_constructor_checks():
    with pytest.raises(ValueError):
        Tokenizer([])
    with pytest.raises(ValueError):
        Tokenizer(["a", "b"], merges=[], scores=[0.0, 0.0])
    with pytest.raises(ValueError):
        Tokenizer(["a", "b"], scores=[0.0])


def test_sentencepiece_vocabulary_drives_constraints(spm):
    """llguidance reads the rebuilt JSON of a SentencePiece vocabulary too (byte fallback and all)."""
    import json
    import time

    import torch

    from llmtrace.backend.generation.params import Constraint, SamplingParams
    from llmtrace.backend.generation.pipeline import GenerationPipeline

    pipe = GenerationPipeline(spm, eos_token_ids=spm.eos_token_ids, vocab_size=spm.vocab_size)
    schema = {"type": "object", "properties": {"k": {"enum": ["日本", "🦙"]}}, "required": ["k"],
              "additionalProperties": False}
    st = pipe.new_state(SamplingParams(seed=0, max_tokens=40, constraint=Constraint("json_schema", schema)), [1])
    g = torch.Generator().manual_seed(0)
    while not st.finished:
        pipe.accept(st, pipe.sample(torch.randn(1, spm.vocab_size, generator=g), [st])[0], time.time_ns())
    assert json.loads(st.text)["k"] in ("日本", "🦙")
