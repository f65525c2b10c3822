"""Which arithmetic computes each phase on this host, chosen once at start from what the CPU can do.

Measured on three CPU kinds (benchmarks/results/engine.json, docs/benchmarks.md):

- AVX-512 BF16 (an EPYC Zen 4): bfloat16 everywhere; prefill matmuls through bfloat16 dot products, the native
  attention kernels, the fused native int4 decode layers. The fastest prefill there.
- no bfloat16 dot products but AVX-512 VNNI (a Xeon with AVX-512 F/BW/VNNI and no BF16; any CPU under
  ``LLMTRACE_CPU_PATH=nobf16``): torch widens each bfloat16 product to float32 in software, so a bfloat16
  prefill matmul runs ~3-7x slower than a float32 one. The wide (prefill) matmuls run on VNNI integer dot
  products (``cpu_gemm_int.c``: int16 codes per weight channel and per row, vpdpwssd; SmolLM2's four layer
  matmuls at 1,000 rows on one Xeon core, CPU time: 32 ms against 61 ms in float32, the logits as close to
  float32's as the float32 matmuls'), with float32 copies of the weights for what the kernel does not take;
  everything else stays bfloat16: the KV cache, the row kernels and the fused native int4 decode layers
  (``cpu_native.c`` builds here without BF16; a decode step of SmolLM2 at 1,000 cached tokens, one Xeon core,
  CPU time: 16.2 ms against the float32 model's 35.8 ms, prefill the same). ``prefill_dtype`` and
  ``prefill_gemm`` say so; ``LLMTRACE_PREFILL_GEMM=float32`` keeps the float32 matmuls (the path before),
  ``int16`` takes the integer kernel on any CPU the native library builds on (a BF16 one too, to measure it).
- no AVX-512 (an AVX2 EPYC Zen 3): no fused native decode to keep, so the whole model goes float32 (SmolLM2's
  QKV at 500 rows on one Zen 3 core: 134 ms bfloat16 against 19 ms float32). Decode keeps the int4 kernel on
  the GGUF's exact 4-bit codes (the AVX2 GEMV, or torch's CPU int4 kernel, which is fast only with bfloat16
  activations: float32 ones take a slow path, 4.7 ms against 0.16 ms for the same product, so a decode row is
  rounded to bfloat16 for those matmuls and the result widened back).

``--dtype`` (``EngineConfig.dtype``) overrides the storage dtype; ``decode`` overrides the decode matmuls
(``dense``: the plain float32 reference the numerics tests compare against).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmtrace.backend.model.cpu_features import CpuFeatures, detect
from llmtrace.tracer.settings import env

DTYPE_CHOICES = ("auto", "float32", "bfloat16")
GEMM_ENV = "LLMTRACE_PREFILL_GEMM"
GEMM_CHOICES = ("auto", "float32", "int16")
INT_GEMM = "vnni_i16"  # the integer prefill kernel's name in the path labels (cpu_gemm.LABEL)
DECODE_CHOICES = ("auto", "int4", "dense")
_SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16"}


@dataclass(frozen=True, slots=True)
class ComputePath:
    """The engine's arithmetic per phase. ``dtype``: activations and the KV cache; ``prefill_dtype``: the
    weights of wide matmuls and their arithmetic (None: ``dtype``); ``int4_decode``: narrow matmuls (decode
    steps) on the exact 4-bit codes where the GGUF holds them."""

    device: str
    dtype: torch.dtype
    int4_decode: bool
    reason: str
    features: CpuFeatures | None  # None off the CPU
    prefill_dtype: torch.dtype | None = None
    prefill_gemm: str = ""  # INT_GEMM: the wide matmuls on the integer VNNI kernel; "": in ``wide_dtype``

    def __post_init__(self) -> None:
        for dt in (self.dtype, self.wide_dtype):
            if dt not in _SHORT:
                raise ValueError(f"dtype must be float32 or bfloat16, got {dt}")

    @property
    def wide_dtype(self) -> torch.dtype:
        """The dtype of the wide (prefill) matmuls' weights and arithmetic."""
        return self.prefill_dtype or self.dtype

    @property
    def dtype_name(self) -> str:
        return "bfloat16" if self.dtype == torch.bfloat16 else "float32"

    @property
    def short(self) -> str:
        """The wide matmuls' weight dtype (``fp32``/``bf16``)."""
        return _SHORT[self.wide_dtype]

    @property
    def prefill_label(self) -> str:
        """The wide matmuls' arithmetic as the prefill path names it: ``vnni_i16``, ``fp32`` or ``bf16``."""
        return self.prefill_gemm or self.short


def choose(device: str = "cpu", dtype: str = "auto", decode: str = "auto",
           features: CpuFeatures | None = None) -> ComputePath:
    """The path for ``device``: ``dtype``/``decode`` ``auto`` choose by the host, anything else overrides.

    Off the CPU: bfloat16 for ``auto`` (tensor cores) and no int4 (its kernel is CPU-only). ``decode`` ``auto``
    keeps int4 unless float32 was asked for by name: the explicit float32 engine is the numerics reference.
    """
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {dtype!r}")
    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode must be one of {', '.join(DECODE_CHOICES)}, got {decode!r}")
    if device.split(":")[0] != "cpu":
        chosen = torch.bfloat16 if dtype == "auto" else _torch_dtype(dtype)
        why = f"{device}: bfloat16 on the device" if dtype == "auto" else f"{device}: dtype {dtype} asked for"
        return ComputePath(device, chosen, False, why, None)
    feats = features or detect()
    wide = None
    if dtype != "auto":
        chosen, why = _torch_dtype(dtype), f"dtype {dtype} asked for"
    elif feats.bf16_dot:
        chosen, why = torch.bfloat16, "bfloat16 dot products (avx512_bf16/amx): bfloat16 matmuls"
    elif feats.native_kernels and decode != "dense":  # the fused bfloat16 int4 decode builds here: keep it
        chosen, wide = torch.bfloat16, torch.float32
    else:
        chosen, why = torch.float32, f"no bfloat16 dot products ({feats.isa}): float32 matmuls"
    gemm = _prefill_gemm(feats, dtype, decode, wide)
    if wide is not None:
        why = (f"no bfloat16 dot products ({feats.isa}): {'int16 VNNI' if gemm else 'float32'} prefill matmuls, "
               "bfloat16 cache and fused native int4 decode")
    if feats.forced != "auto":
        why += f" ({feats.forced} forced by LLMTRACE_CPU_PATH)"
    int4 = decode == "int4" or (decode == "auto" and dtype != "float32")
    if gemm and wide is None:
        why += f"; int16 VNNI prefill matmuls ({GEMM_ENV}=int16)"
    return ComputePath(device, chosen, int4, why, feats, wide, gemm)


def prefill_gemm_setting() -> str:
    """``LLMTRACE_PREFILL_GEMM``, checked: ``auto`` when unset; ValueError for a value it does not know."""
    value = (env(GEMM_ENV) or "auto").lower()
    if value not in GEMM_CHOICES:
        raise ValueError(f"{GEMM_ENV} must be one of {', '.join(GEMM_CHOICES)}, got {value!r}")
    return value


def _prefill_gemm(feats: CpuFeatures, dtype: str, decode: str, wide: torch.dtype | None) -> str:
    """The integer kernel for the wide matmuls where the dtype is the host's choice (``--dtype`` by name keeps
    its matmuls) and the native library builds: by default only where they would otherwise run in float32
    beside a bfloat16 model (no bfloat16 dot products); ``int16`` forces it, ``float32`` keeps it off."""
    setting = prefill_gemm_setting()
    # LLMTRACE_NATIVE=0 keeps the native library unloaded (cpu_native.py): the kernel cannot run, so the path
    # (and its reason) must not name it
    native_off = env("LLMTRACE_NATIVE") == "0"
    if dtype != "auto" or setting == "float32" or not feats.native_kernels or native_off or decode == "dense":
        return ""
    return INT_GEMM if setting == "int16" or wide == torch.float32 else ""


def _torch_dtype(name: str) -> torch.dtype:
    return torch.bfloat16 if name == "bfloat16" else torch.float32
