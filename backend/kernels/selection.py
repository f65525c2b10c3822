"""Choose the attention backend for a device, and say why (the ``forward.attention`` boundary values)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from llmtrace.backend.kernels.interface import AttentionBackend

KNOWN = ("torch", "triton")


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backend in use, why it was chosen, and whether that is a fallback from the preferred one."""

    backend: AttentionBackend
    name: str
    reason: str
    fallback: bool


def _triton_class() -> tuple[type | None, str]:
    try:
        module = importlib.import_module("llmtrace.backend.kernels.triton_attention")
    except Exception as exc:  # an ImportError, or triton failing to initialise
        return None, f"{type(exc).__name__}: {exc}"
    cls = getattr(module, "TritonPagedAttention", None)
    if cls is None:
        return None, "llmtrace.backend.kernels.triton_attention has no TritonPagedAttention"
    return cls, ""


def _make_torch(invariant: bool) -> AttentionBackend:
    from llmtrace.backend.kernels.torch_reference import TorchPagedAttention

    return TorchPagedAttention(invariant=invariant)


def _make_triton(cls: type, invariant: bool) -> AttentionBackend:
    try:
        return cls(invariant=invariant)
    except TypeError:  # a kernel without the invariant option
        return cls()


def select_backend(device: str = "cpu", forced: str | None = None, invariant: bool = False) -> BackendChoice:
    """Triton on CUDA when its kernel imports, else the torch reference; ``forced`` overrides.

    Batch-invariant mode asks the backend for its invariant path; the torch reference always has one.
    Raises ValueError for an unknown name or a forced backend that cannot run here.
    """
    device_type = device.split(":")[0]
    if forced is not None:
        if forced not in KNOWN:
            raise ValueError(f"unknown attention backend {forced!r}; choose one of {', '.join(KNOWN)}")
        if forced == "torch":
            return BackendChoice(_make_torch(invariant), "torch", "forced by configuration", fallback=False)
        if device_type != "cuda":
            raise ValueError(f"attention backend 'triton' needs a CUDA device; this engine runs on {device!r}")
        cls, why = _triton_class()
        if cls is None:
            raise ValueError(f"attention backend 'triton' is not available: {why}")
        return BackendChoice(_make_triton(cls, invariant), "triton", "forced by configuration", fallback=False)
    if device_type != "cuda":
        return BackendChoice(_make_torch(invariant), "torch", "no CUDA device", fallback=False)
    cls, why = _triton_class()
    if cls is None:
        return BackendChoice(_make_torch(invariant), "torch", f"triton kernel unavailable ({why})", fallback=True)
    return BackendChoice(_make_triton(cls, invariant), "triton", "CUDA device and triton kernel available", False)
