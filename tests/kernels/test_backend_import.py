"""Importing the Triton backend: a clear error without Triton, no CUDA needed, honest capability checks."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from kernel_reference import (  # noqa: F401 - interpreter_flag is an autouse fixture
    interpreter_flag,
    need_triton,
)

need_triton()

import torch  # noqa: E402

MODULE = "llmtrace.backend.kernels.triton_attention"


def test_import_without_triton_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    with pytest.raises(ImportError, match=r"llmtrace-stages\[gpu\]"):
        importlib.import_module(MODULE)


def test_import_needs_no_cuda_and_no_interpreter():
    """A fresh process with no GPU visible and the interpreter off still imports the backend."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = (
        f"import {MODULE} as m, torch; "
        "print(m.TritonPagedAttention.name, "
        "m.unsupported_reason(head_dim=64, dtype=torch.bfloat16, device='cpu'))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("triton no GPU")


def test_unsupported_reasons(monkeypatch):
    from llmtrace.backend.kernels.triton_attention import unsupported_reason

    ok = {"head_dim": 64, "dtype": torch.bfloat16, "device": "cuda"}
    assert unsupported_reason(**ok) is None
    assert "head size 512" in unsupported_reason(**{**ok, "head_dim": 512})
    assert "dtype" in unsupported_reason(**{**ok, "dtype": torch.float64})
    assert "sliding-window" in unsupported_reason(**ok, sliding_window=4096)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert unsupported_reason(**{**ok, "device": "cpu"}).startswith("no GPU")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert unsupported_reason(**{**ok, "device": "cpu"}) is None
