"""backend/model/gguf_metadata.py: a GGUF file's metadata read without mapping its tensors gives what
``gguf.GGUFReader`` gives, and the tokenizer built from it encodes as the one built from the reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFReader

from llmtrace.backend.model.gguf_metadata import read_metadata
from llmtrace.backend.model.pull import default_model_path
from llmtrace.backend.model.tokenizer import _CACHE, Tokenizer


def test_every_metadata_value_is_the_readers() -> None:
    path = default_model_path()
    reader = GGUFReader(str(path))
    want = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert read_metadata(path) == want


def test_the_tokenizer_from_metadata_encodes_as_the_one_from_the_reader() -> None:
    path = default_model_path()
    _CACHE.clear()
    fast = Tokenizer.from_gguf(path)
    _CACHE.clear()
    slow = Tokenizer.from_gguf(path, reader=GGUFReader(str(path)))
    text = "Héllo wörld! 12345 <|im_start|>user\nTabs\tand  spaces, emoji 🙂 and 日本語."
    assert fast.encode(text) == slow.encode(text)
    assert fast.eos_token_ids == slow.eos_token_ids and fast.bos_token_id == slow.bos_token_id
    assert fast.chat_template == slow.chat_template and fast.vocab_size == slow.vocab_size


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model at all, just some bytes")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_metadata(bad)
