"""What the host CPU can compute fast, read once per process: the flags that decide the engine's paths.

Why: the engine's paths were tuned on a CPU with AVX-512 BF16, where bfloat16 matmuls are the fastest prefill.
On a CPU without bfloat16 dot products (an AVX-512 Xeon without BF16, an AVX2-only EPYC) torch widens bfloat16
to float32 for every product and the same prefill runs 3-7x slower than a float32 one; on AVX2 the native
kernels (``cpu_native.c``, AVX-512 only) do not build at all. ``compute_path`` turns these flags into a choice.

``LLMTRACE_CPU_PATH`` (read here, once) hides features so every developer can run the other CPU kinds' paths:

- ``auto`` (default): what the CPU has.
- ``nobf16``: as if the CPU had no bfloat16 dot products and no AMX (an AVX-512 Xeon without BF16): the native
  library is built without them (``-mno-avx512bf16``) and prefill takes the no-bfloat16 path.
- ``avx2``: as if the CPU had no AVX-512 at all (this project's AVX2 EPYC): no native library.

Hiding only ever removes features; a forced path the CPU already lacks is what it runs anyway. It steers this
engine's choices and the native library's build; torch's own kernels still dispatch on the real CPU (its ISA
is fixed when torch loads), which the recorded ``torch_cpu_capability`` shows.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from llmtrace.tracer.settings import env

ENV = "LLMTRACE_CPU_PATH"
FORCED_PATHS = ("auto", "nobf16", "avx2")
# the flags the engine's choices read, as /proc/cpuinfo spells them (recorded by the benchmarks too)
RELEVANT = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
            "amx_bf16", "amx_int8")
_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")  # what ``nobf16`` hides (AMX too: its tiles
# are bfloat16/int8 only, and torch's bfloat16 GEMM would take them)
_ISA_ORDER = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512_vnni", "avx512_vnni"),
              ("avx512f", "avx512"), ("avx2", "avx2"))


def forced_path() -> str:
    """``LLMTRACE_CPU_PATH``, checked: ``auto`` when unset; ValueError for a value it does not know."""
    value = (env(ENV) or "auto").lower()
    if value not in FORCED_PATHS:
        raise ValueError(f"{ENV} must be one of {', '.join(FORCED_PATHS)}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class CpuFeatures:
    """The host's relevant flags after the forced path hid some (``hidden``: what it hid), and torch's own
    report of the vector ISA its kernels dispatch to (``torch.backends.cpu.get_cpu_capability``)."""

    flags: frozenset[str]
    hidden: frozenset[str]
    forced: str
    torch_capability: str
    model: str

    @property
    def bf16_dot(self) -> bool:
        """bfloat16 products at full speed: AVX-512 BF16 (vdpbf16ps) or AMX tiles."""
        return "avx512_bf16" in self.flags or "amx_bf16" in self.flags

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.flags and "avx512bw" in self.flags

    @property
    def vnni(self) -> bool:
        return "avx512_vnni" in self.flags

    @property
    def native_kernels(self) -> bool:
        """Whether ``cpu_native.c`` can build here (it needs AVX-512 F/BW/VNNI and F16C)."""
        return self.avx512 and self.vnni and "f16c" in self.flags

    @property
    def isa(self) -> str:
        """One word for the CPU kind: amx, avx512_bf16, avx512_vnni, avx512, avx2 or baseline."""
        return next((word for flag, word in _ISA_ORDER if flag in self.flags), "baseline")

    def as_dict(self) -> dict[str, object]:
        """For the benchmark JSON and the ready line: every relevant flag as seen, and what was hidden."""
        return {
            "cpu_model": self.model,
            "cpu_flags": {name: name in self.flags for name in RELEVANT},
            "cpu_flags_hidden": sorted(self.hidden),
            "cpu_path_forced": self.forced,
            "torch_cpu_capability": self.torch_capability,
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),  # now, not at detection: a benchmark sets them after
        }


def _cpuinfo() -> tuple[set[str], str]:
    flags: set[str] = set()
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not flags:
                model = value.strip()
            if key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:  # not Linux: no flags known, the torch paths serve
        pass
    return flags, model


def _torch_capability() -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # an old torch without the report
        return "unknown"


@functools.cache
def detect() -> CpuFeatures:
    """The host's features under ``LLMTRACE_CPU_PATH``; cached for the process (the native library is built
    once per process too, so a change of the variable later would not reach it)."""
    forced = forced_path()
    flags, model = _cpuinfo()
    hide: set[str] = set()
    if forced in ("nobf16", "avx2"):
        hide |= {f for f in flags if f in _BF16_FLAGS}
    if forced == "avx2":
        hide |= {f for f in flags if f.startswith("avx512") or f.startswith("amx")}
    return CpuFeatures(frozenset(flags - hide), frozenset(hide), forced, _torch_capability(), model)
