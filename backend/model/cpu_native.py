"""Native CPU kernels for the bfloat16 decode path, compiled from ``cpu_native.c`` at first use.

Why: a batch-1 decode step of a small model is hundreds of tiny ops; at this size the time goes to dispatch
and to copies (gathering KV pages, transposing them for a batched matmul), not to arithmetic. The C kernels
read the paged cache in place and fuse the step's attention into one call per layer.

The library is built once per machine with the system C compiler (``-O3 -march=native``, less bfloat16 under
``LLMTRACE_CPU_PATH=nobf16``: see ``cpu_features``) into the user's cache directory and loaded with ctypes; no compiler, a failed build or ``LLMTRACE_NATIVE=0`` leaves
``load()`` returning None and every caller on its torch path. A build the compiler refused is remembered there
too (``*.failed``, per source, flags, CPU and compiler), so later processes do not run it again.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from llmtrace.backend.model import cpu_features
from llmtrace.tracer.settings import env

SOURCE = Path(__file__).with_name("cpu_native.c")
# compiled together into one library; the header holds helpers both use
SOURCES = (SOURCE, SOURCE.with_name("cpu_prefill.c"), SOURCE.with_name("cpu_gemm_int.c"))
HEADER = SOURCE.with_name("cpu_native.h")
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC", "-std=c11"]
GEMV_SOURCE = SOURCE.with_name("cpu_gemv_avx2.c")
# AVX2 by name, not -march=native: the same code on an AVX-512 CPU under LLMTRACE_CPU_PATH=avx2 as on an AVX2 one
GEMV_FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-mtune=native", "-fno-math-errno", "-fopenmp", "-shared",
              "-fPIC", "-std=c11"]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False
load_error = ""  # why the library is not in use (for the trace and for tests)
_gemv: ctypes.CDLL | None = None  # the AVX2 library (GEMV, float32 decode attention)
_gemv_tried = False
gemv_error = ""

_p = ctypes.c_void_p
_i = ctypes.c_int64


class DecodeStep(ctypes.Structure):
    """One decode step's arguments (``DecodeStep`` in cpu_native.c), filled once per step."""

    _fields_ = [
        ("hidden", _p), ("rows", _i), ("hid", _i), ("heads", _i), ("kv_heads", _i), ("head_dim", _i),
        ("block_size", _i), ("inter", _i), ("table_width", _i), ("eps", ctypes.c_float), ("scale", ctypes.c_float),
        ("layer_ptrs", _p), ("cos_t", _p), ("sin_t", _p), ("positions", _p), ("slots", _p), ("tables", _p),
        ("seq_lens", _p), ("work", _p),
    ]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmtrace" / "native"


def _machine_key(sources: tuple[Path, ...], flags: list[str]) -> str:
    """The build depends on the sources, the flags and (with -march=native) the CPU it ran on."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "model name")):
                cpu += line
            if line.startswith("flags"):
                break
    except OSError:
        cpu = platform.processor()
    code = b"".join(p.read_bytes() for p in sources)
    h = hashlib.sha256(code + " ".join(flags).encode() + cpu.encode() + platform.machine().encode())
    return h.hexdigest()[:16]


def _flags() -> list[str]:
    """FLAGS, less what ``LLMTRACE_CPU_PATH`` hides: ``nobf16`` builds the variant a CPU without bfloat16 dot
    products gets (cpu_prefill.c's ``#else``), on any CPU (its own file: the key hashes the flags)."""
    if cpu_features.detect().hidden & {"avx512_bf16", "amx_bf16"}:
        return [*FLAGS, "-mno-avx512bf16", "-mno-amx-bf16"]
    return list(FLAGS)


def _compile(stem: str, sources: tuple[Path, ...], flags: list[str]) -> Path:
    """The shared library built from ``sources`` with ``flags`` in the cache directory (built once per machine)."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) on PATH")
    target = _cache_dir() / f"{stem}-{_machine_key((*sources, HEADER), flags)}.so"
    # A compiler's refusal of this source on this CPU (the kernels' #error without AVX-512) is as lasting as a
    # build: remembered next to it, per compiler, so each later process (every `llmtrace serve`, every engine)
    # does not spend ~1 s of CPU on the same failing gcc run. A timeout or a crash of the compiler is not kept.
    failed = target.with_name(f"{target.stem}-{hashlib.sha256(cc.encode()).hexdigest()[:8]}.failed")
    if not target.is_file() and failed.is_file():
        raise RuntimeError(f"{failed.read_text(errors='replace')} (remembered in {failed}; remove it to retry)")
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            run = subprocess.run([cc, *flags, "-o", tmp, *map(str, sources), "-lm"], capture_output=True, text=True,
                                 timeout=120)
            if run.returncode != 0:
                error = f"{cc} failed: {run.stderr.strip()[:500]}"
                if run.returncode > 0:  # the compiler ran and said no (a signal is not an answer)
                    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False) as note:
                        note.write(error)
                    os.replace(note.name, failed)
                raise RuntimeError(error)
            os.replace(tmp, target)  # atomic: a concurrent process sees the old state or the whole library
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


def _set_gemv_types(lib: ctypes.CDLL) -> None:
    lib.quant_gemv.restype = ctypes.c_int
    lib.quant_gemv.argtypes = [ctypes.c_int, _p, _i, _i, _p, _p, _i, _p, _p, _p]


def _build() -> ctypes.CDLL:
    features = cpu_features.detect()
    if not features.native_kernels:  # known before running gcc: its #error would say the same, ~1 s later
        forced = f" (LLMTRACE_CPU_PATH={features.forced})" if features.forced != "auto" else ""
        raise RuntimeError(f"this CPU ({features.isa}{forced}) lacks AVX-512 F/BW/VNNI or F16C, which the native "
                           "kernels need; the torch path serves it")
    target = _compile("cpu_native", SOURCES, _flags())
    lib = ctypes.CDLL(str(target))
    lib.paged_decode_bf16.restype = ctypes.c_int
    lib.paged_decode_bf16.argtypes = [_p, _p, _p, _p, _i, _p, _p, _i, _i, _i, _i, _i, ctypes.c_float, _p, _p]
    lib.lt_has_vnni.restype = ctypes.c_int
    lib.lt_threads.restype = ctypes.c_int
    _set_gemv_types(lib)
    lib.decode_attention_block.restype = ctypes.c_int
    lib.decode_attention_block.argtypes = [_p, _i, _i, _p, ctypes.c_float, _p, _p, _p, _p, _p, _p, _p, _p, _p, _i, _p,
                                           _i, _i, _i, _i, ctypes.c_float, _p]
    lib.decode_mlp_block.restype = ctypes.c_int
    lib.decode_mlp_block.argtypes = [_p, _i, _i, _p, ctypes.c_float, _p, _p, _i, _p]
    lib.prefill_attention_bf16.restype = ctypes.c_int
    lib.prefill_attention_bf16.argtypes = [_p, _p, _p, _p, _i, _i, _i, _i, _i, _i, ctypes.c_float, _p]
    lib.prefill_attention_widened.restype = ctypes.c_int
    lib.prefill_attention_widened.argtypes = lib.prefill_attention_bf16.argtypes
    lib.lt_has_bf16_dot.restype = ctypes.c_int
    lib.rows_rms_norm_bf16.restype = ctypes.c_int
    lib.rows_rms_norm_bf16.argtypes = [_p, _i, _i, _p, ctypes.c_float, _p]
    lib.rows_silu_mul_bf16.restype = ctypes.c_int
    lib.rows_rope_bf16.restype = ctypes.c_int
    lib.rows_rope_bf16.argtypes = [_p, _i, _i, _i, _p, _p, _p]
    lib.rows_silu_mul_bf16.argtypes = [_p, _i, _i, _p]
    lib.gemm_i16_packed_size.restype = _i
    lib.gemm_i16_packed_size.argtypes = [_i, _i]
    lib.gemm_pack_i16.restype = ctypes.c_int
    lib.gemm_pack_i16.argtypes = [_p, _i, _i, _p, _p]
    lib.gemm_i16.restype = ctypes.c_int
    lib.gemm_i16.argtypes = [_p, _p, _i, _i, _p, _p, _i, _p, _p]
    for name in ("step_attention", "step_mlp"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(DecodeStep), _i]
    if not lib.lt_has_vnni():
        raise RuntimeError("this CPU lacks AVX-512 VNNI (the kernels' only implementation)")
    return lib


def load() -> ctypes.CDLL | None:
    """The native library, built on first call; None where it cannot be used (see ``load_error``)."""
    global _lib, _tried, load_error
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        if env("LLMTRACE_NATIVE") == "0":
            load_error = "disabled by LLMTRACE_NATIVE=0"
        elif platform.system() != "Linux":
            load_error = f"native kernels are built on Linux only (this is {platform.system()})"
        else:
            try:
                _lib = _build()
            except Exception as exc:  # no compiler, a build error, a loader error: the torch path serves
                load_error = f"{type(exc).__name__}: {exc}"
        _tried = True
    return _lib


def _build_gemv() -> ctypes.CDLL:
    features = cpu_features.detect()
    if not {"avx2", "fma", "f16c"} <= features.flags:
        raise RuntimeError(f"this CPU ({features.isa}) lacks AVX2/FMA/F16C: no native GEMV")
    lib = ctypes.CDLL(str(_compile("cpu_gemv_avx2", (GEMV_SOURCE,), GEMV_FLAGS)))
    _set_gemv_types(lib)
    lib.paged_decode_f32.restype = ctypes.c_int
    lib.paged_decode_f32.argtypes = [_p, _p, _p, _p, _i, _p, _p, _i, _i, _i, _i, _i, ctypes.c_float, _p, _p, _i]
    return lib


def avx2_library() -> ctypes.CDLL | None:
    """``cpu_gemv_avx2.c``'s library (the AVX2 GEMV and the float32 paged decode attention) where the CPU has
    AVX2, FMA and F16C, AVX-512 or not; None where it cannot be used (see ``gemv_error``)."""
    global _gemv, _gemv_tried, gemv_error
    if _gemv_tried:
        return _gemv
    with _lock:
        if not _gemv_tried:
            if env("LLMTRACE_NATIVE") == "0":
                gemv_error = "disabled by LLMTRACE_NATIVE=0"
            elif platform.system() != "Linux":
                gemv_error = f"native kernels are built on Linux only (this is {platform.system()})"
            else:
                try:
                    _gemv = _build_gemv()
                except Exception as exc:  # no compiler, a build error: torch's kernels serve
                    gemv_error = f"{type(exc).__name__}: {exc}"
            _gemv_tried = True
    return _gemv


def gemv_library() -> ctypes.CDLL | None:
    """The library whose ``quant_gemv`` serves narrow rows on the exact GGUF codes: the full native library
    where it builds (AVX-512), else the AVX2 one; None where neither."""
    return load() or avx2_library()


def paged_decode_f32(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    seq_lens: torch.Tensor, rows: torch.Tensor | None, max_len: int, scale: float,
) -> torch.Tensor | None:
    """``paged_decode`` for a float32 cache (a float32 model's decode steps), from the AVX2 library: the pages
    read in place; None where it cannot take these inputs (no library, head size not 64, ...)."""
    lib = avx2_library()
    if lib is None or q.dtype != torch.float32 or k_cache.dtype != torch.float32 or q.device.type != "cpu":
        return None
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32 or q.shape[-1] != 64:
        return None
    q = q.contiguous()
    tables, lens = block_tables.contiguous(), seq_lens.contiguous()
    n, heads, dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    stride = max_len + 8
    scratch = torch.empty(torch.get_num_threads() * 8 * stride, dtype=torch.float32)
    rc = lib.paged_decode_f32(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), tables.data_ptr(),
                              tables.shape[1], lens.data_ptr(), None if rows is None else rows.data_ptr(), n, heads,
                              kv_heads, dim, block_size, scale, out.data_ptr(), scratch.data_ptr(), stride)
    return out if rc == 0 else None


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    rows: torch.Tensor | None,
    max_len: int,
    scale: float,
) -> torch.Tensor | None:
    """Decode attention of ``q: [n, H, D]`` (bfloat16) over the paged bfloat16 cache, or None when the native
    kernel cannot take these inputs. ``rows``: int64 table row of each query row (None: row i)."""
    lib = load()
    if lib is None or q.dtype != torch.bfloat16 or k_cache.dtype != torch.bfloat16 or q.device.type != "cpu":
        return None
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        return None
    q = q.contiguous()
    tables = block_tables.contiguous()
    lens = seq_lens.contiguous()
    n, heads, dim = q.shape
    num_blocks, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    scratch = torch.empty(heads * (max_len + 16), dtype=torch.float32)
    rc = lib.paged_decode_bf16(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), tables.data_ptr(), tables.shape[1],
        lens.data_ptr(), None if rows is None else rows.data_ptr(), n, heads, kv_heads, dim, block_size,
        scale, out.data_ptr(), scratch.data_ptr(),
    )
    return out if rc == 0 else None


@functools.cache
def has_bf16_dot() -> bool:
    """Whether the native prefill attention was built (the CPU has AVX-512 BF16); asked of the library once."""
    lib = load()
    return lib is not None and bool(lib.lt_has_bf16_dot())


def paged_prefill(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table: torch.Tensor, seq_len: int, scale: float
) -> torch.Tensor | None:
    """Causal attention of one sequence's ``q: [n, H, D]`` new tokens (bfloat16; positions ``seq_len - n ..``,
    their keys and values already in the cache) over its paged bfloat16 cache (``table``: its int32 block table
    row), or None when the native kernel cannot take these inputs (another head size...). Products on AVX-512
    BF16 dot products where the CPU has them, else in float32 FMAs (``prefill_attention_widened``)."""
    lib = load()
    if lib is None or q.dtype != torch.bfloat16 or k_cache.dtype != torch.bfloat16 or q.device.type != "cpu":
        return None
    if table.dtype != torch.int32:
        return None
    kernel = lib.prefill_attention_bf16 if has_bf16_dot() else lib.prefill_attention_widened
    q = q.contiguous()
    table = table.contiguous()
    n, heads, dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    if table.shape[0] * block_size < seq_len:
        return None
    out = torch.empty_like(q)
    rc = kernel(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), table.data_ptr(), seq_len, n, heads, kv_heads,
                dim, block_size, scale, out.data_ptr())
    return out if rc == 0 else None


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """RMSNorm of bfloat16 rows ``x: [m, hid]`` with a float32 weight, float32 inside, one rounding to bfloat16
    (the model's norm in one pass instead of widen, norm, round); None where the kernel does not apply."""
    lib = load()
    if lib is None or x.dtype != torch.bfloat16 or x.dim() != 2 or x.device.type != "cpu":
        return None
    if weight.dtype != torch.float32 or weight.shape != (x.shape[1],):
        return None
    x = x.contiguous()
    out = torch.empty_like(x)
    rc = lib.rows_rms_norm_bf16(x.data_ptr(), x.shape[0], x.shape[1], weight.contiguous().data_ptr(), eps,
                                out.data_ptr())
    return out if rc == 0 else None


def silu_mul_rows(gate_up: torch.Tensor) -> torch.Tensor | None:
    """``silu(gate) * up`` of bfloat16 rows ``[gate | up]: [m, 2 inter]`` in one pass, float32 inside, rounded
    once; None where the kernel does not apply."""
    lib = load()
    if lib is None or gate_up.dtype != torch.bfloat16 or gate_up.dim() != 2 or gate_up.device.type != "cpu":
        return None
    gate_up = gate_up.contiguous()
    rows, width = gate_up.shape
    out = torch.empty(rows, width // 2, dtype=torch.bfloat16)
    rc = lib.rows_silu_mul_bf16(gate_up.data_ptr(), rows, width // 2, out.data_ptr())
    return out if rc == 0 and width % 2 == 0 else None


def rope_applies(heads: int, rows: int, width: int, positions: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor) -> bool:
    """Whether ``rope_rows`` can rotate ``rows`` fused QKV rows ``width`` wide at ``positions``: the checks
    fixed for a whole forward (the library, the tables, the positions and the largest of them), asked once
    per forward instead of once per layer."""
    if load() is None or heads * 64 > width or cos.shape[-1] != 32:
        return False
    if cos.dtype != torch.float32 or sin.dtype != torch.float32 or not (cos.is_contiguous() and sin.is_contiguous()):
        return False
    if positions.dtype != torch.int64 or positions.shape != (rows,) or not positions.is_contiguous():
        return False
    return positions.device.type == "cpu" and not (rows and int(positions.max()) >= cos.shape[0])


def rope_rows(x: torch.Tensor, heads: int, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              checked: bool = False) -> bool:
    """Half-split rotary in place on the first ``heads`` 64-wide heads of each bfloat16 row of ``x`` (a fused
    QKV output: query then key heads), float32 inside with the model's tables ``cos``/``sin: [*, 32]``; False
    (nothing done) where the kernel does not apply. ``checked``: ``rope_applies`` already said yes for these
    positions and tables (the forward asks once); only ``x`` itself is checked here."""
    lib = load()
    if lib is None or x.dtype != torch.bfloat16 or x.dim() != 2 or not x.is_contiguous() or x.device.type != "cpu":
        return False
    if not checked and not rope_applies(heads, x.shape[0], x.shape[1], positions, cos, sin):
        return False
    if heads * 64 > x.shape[1] or positions.shape != (x.shape[0],):
        return False
    return lib.rows_rope_bf16(x.data_ptr(), x.shape[0], x.shape[1], heads, positions.data_ptr(), cos.data_ptr(),
                              sin.data_ptr()) == 0


MAX_K = 8192  # the longest row the GEMV kernel holds (its buffers)


@dataclass(frozen=True, slots=True)
class QuantWeight:
    """A weight matrix ``[n, k]`` in the GEMV kernel's tiled layout (see ``cpu_native.c``): the GGUF's exact
    codes and fp16 block scales, 16 output rows by 32 columns at a time, one memory stream. kind 4: Q4_1
    (320 bytes per tile block), kind 8: Q8_0 (544 bytes)."""

    kind: int
    records: torch.Tensor  # uint8, n / 16 tiles of k / 32 blocks
    n: int
    k: int


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    """GGUF keeps block scales in fp16 (the parts hold them widened to float32): narrowing back is exact.
    ``[n, k/32]`` -> bytes ``[n/16, k/32, 32]`` (a tile's 16 scales of one block side by side)."""
    n, nb = values.shape
    half = np.ascontiguousarray(values, np.float32).astype(np.float16).reshape(n // 16, 16, nb)
    return np.ascontiguousarray(half.transpose(0, 2, 1)).view(np.uint8).reshape(n // 16, nb, 32)


def _usable(n: int, k: int) -> bool:
    return gemv_library() is not None and n % 16 == 0 and k % 32 == 0 and k <= MAX_K


def q4_1_weight(codes: np.ndarray, scale: np.ndarray, minimum: np.ndarray) -> QuantWeight | None:
    """The kernel's copy of exact Q4_1 codes (uint8 ``[n, k]`` in 0..15), or None where it does not apply."""
    n, k = codes.shape
    if not _usable(n, k):
        return None
    # [tile, row, block, chunk, col-in-chunk] -> byte i of chunk c = row i // 2, columns 4c + i % 2 (+2)
    c = codes.astype(np.uint8).reshape(n // 16, 16, k // 32, 8, 4).transpose(0, 2, 3, 1, 4)
    packed = (c[..., 0:2] | (c[..., 2:4] << 4)).reshape(n // 16, k // 32, 256)
    records = np.concatenate([packed, _fp16_bytes(scale), _fp16_bytes(minimum)], axis=2)
    return QuantWeight(4, torch.from_numpy(np.ascontiguousarray(records).reshape(-1)), n, k)


def q8_0_weight(codes: np.ndarray, scale: np.ndarray) -> QuantWeight | None:
    """The kernel's copy of exact Q8_0 codes (int8 ``[n, k]``), or None where it does not apply."""
    n, k = codes.shape
    if not _usable(n, k):
        return None
    # [tile, row, block, pair, 2] -> chunk c of a block: byte i = row i // 2, column 2c + i % 2
    c = np.ascontiguousarray(codes, np.int8).view(np.uint8).reshape(n // 16, 16, k // 32, 16, 2)
    packed = c.transpose(0, 2, 3, 1, 4).reshape(n // 16, k // 32, 512)
    records = np.concatenate([packed, _fp16_bytes(scale)], axis=2)
    return QuantWeight(8, torch.from_numpy(np.ascontiguousarray(records).reshape(-1)), n, k)


def quant_matmul(weight: QuantWeight, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor | None:
    """``x @ W.T`` for ``x: [m, k]`` (bfloat16 or float32) as ``out_dtype`` (bfloat16 or float32), with x
    held as int16 codes of one scale per row (128x finer than bfloat16's rounding), integer dot products per
    32-block scaled in float32; None when the kernel cannot take these inputs."""
    lib = gemv_library()
    if lib is None or x.dim() != 2 or x.shape[1] != weight.k or x.device.type != "cpu":
        return None
    if x.dtype not in (torch.bfloat16, torch.float32) or out_dtype not in (torch.bfloat16, torch.float32):
        return None
    x = x.contiguous()
    rows = x.shape[0]
    y = torch.empty(rows, weight.n, dtype=out_dtype)
    xbf, xf = (x.data_ptr(), None) if x.dtype == torch.bfloat16 else (None, x.data_ptr())
    ybf, yf = (y.data_ptr(), None) if out_dtype == torch.bfloat16 else (None, y.data_ptr())
    work = torch.empty(rows * (weight.k + weight.n), dtype=torch.float32) if xf is None or yf is None else None
    rc = lib.quant_gemv(weight.kind, weight.records.data_ptr(), weight.n, weight.k, xbf, xf, rows, ybf, yf,
                        None if work is None else work.data_ptr())
    return y if rc == 0 else None
