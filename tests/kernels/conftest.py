"""Run the Triton kernels in Triton's CPU interpreter when there is no GPU.

``TRITON_INTERPRET`` is read when Triton decorates a kernel — including Triton's own standard library
at ``import triton`` — so it has to be set before the first import. It is set only while this file
imports Triton and our kernel modules, and again while this directory's tests run, then put back, so
other test areas never see it. If some earlier test module already imported Triton in compiled mode,
Triton's Python modules are dropped and imported again under the interpreter. With a CUDA device the
tests run compiled on the GPU instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
import torch

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
_KERNEL_MODULES = (
    "llmtrace.backend.kernels.triton_decode",
    "llmtrace.backend.kernels.triton_prefill",
    "llmtrace.backend.kernels.triton_norm_rotary",
    "llmtrace.backend.kernels.triton_attention",
)


class _Interpreting:
    """Set ``TRITON_INTERPRET=1`` for a while, then restore whatever was there."""

    def __enter__(self) -> None:
        self.saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = self.saved


def _interpreted() -> bool:
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(standard.zeros, InterpretedFunction)


def _load_under_interpreter() -> str | None:
    """Import Triton and our kernels in interpreter mode; return why not if Triton is missing."""
    with _Interpreting():
        try:
            import triton  # noqa: F401
        except Exception as exc:
            return f"Triton is not installed ({exc}); install the extra: pip install 'llmtrace[gpu]'"
        if not _interpreted():
            # Imported earlier in compiled mode: drop the Python side (the C extension stays loaded).
            for name in list(sys.modules):
                top = name == "triton" or name.startswith("triton.")
                if (top and not name.startswith("triton._C")) or name in _KERNEL_MODULES:
                    del sys.modules[name]
            import triton  # noqa: F401,F811
        for name in _KERNEL_MODULES:
            __import__(name)
    return None


# A missing Triton is reported by each test module's importorskip (see kernel_reference.need_triton).
SKIP_REASON = None if ON_GPU else _load_under_interpreter()


@pytest.fixture(autouse=True, scope="module")
def _interpreter_while_testing() -> Iterator[None]:
    """Triton also reads the flag at call time (constexpr helpers), so keep it set during these tests."""
    if ON_GPU:
        yield
        return
    with _Interpreting():
        yield
