"""The attention backend is chosen by device, with a reason; forcing one that cannot run is refused."""

from __future__ import annotations

import pytest

from llmtrace.backend.kernels.selection import select_backend


def test_cpu_gets_the_torch_reference() -> None:
    choice = select_backend("cpu")
    assert (choice.name, choice.reason, choice.fallback) == ("torch", "no CUDA device", False)
    assert choice.backend.name == "torch"


def test_forced_torch_is_honoured_anywhere() -> None:
    choice = select_backend("cpu", forced="torch", invariant=True)
    assert choice.name == "torch" and choice.reason == "forced by configuration"
    assert choice.backend.invariant is True  # type: ignore[attr-defined]


def test_forcing_triton_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device"):
        select_backend("cpu", forced="triton")


def test_unknown_backend_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown attention backend"):
        select_backend("cpu", forced="flash")


def test_engine_records_the_choice(make_engine) -> None:  # noqa: ANN001
    engine = make_engine(num_blocks=8, attention_backend="torch")
    assert engine.stats()["attention_reason"] == "forced by configuration"
    with pytest.raises(ValueError, match="triton"):
        make_engine(num_blocks=8, attention_backend="triton")
