"""The compute path chosen per CPU kind (``compute_path.py``) from the host's flags (``cpu_features.py``), the
forced paths of ``LLMTRACE_CPU_PATH``, and what each path computes: the real model on the host's path and on the
forced no-bfloat16 path stays as close to float32 as the bfloat16 path does, and the trace says which path ran.

The CPU kinds below are the flag sets /proc/cpuinfo gives on the machines the engine was measured on; the
choice is a function of them, so every kind's choice is checked on any machine. What the paths compute is
checked on this machine's CPU, as it is and with bfloat16 (and AVX-512) hidden.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from engine_helpers import greedy, run_all
from paged_helpers import PagedHarness

import llmtrace
from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
from llmtrace.backend.engine.engine import load_model
from llmtrace.backend.model import cpu_features, cpu_native
from llmtrace.backend.model.compute_path import choose
from llmtrace.backend.model.cpu_features import CpuFeatures
from llmtrace.backend.model.gguf_reader import GGUFModelFile
from llmtrace.backend.model.llama import LlamaModel
from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

BASE = {"avx2", "fma", "f16c"}
KINDS = {
    "epyc_zen4_avx512_bf16": BASE | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"},
    "xeon_sapphire_rapids_amx": BASE | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
                                        "amx_int8"},
    "xeon_avx512_no_bf16": BASE | {"avx512f", "avx512bw", "avx512_vnni"},
    "epyc_zen3_avx2": set(BASE),
}


def _kind(name: str, forced: str = "auto") -> CpuFeatures:
    return CpuFeatures(frozenset(KINDS[name]), frozenset(), forced, "AVX2", name)


BF16, F32 = torch.bfloat16, torch.float32


@pytest.mark.parametrize(("kind", "dtype", "wide"), [("epyc_zen4_avx512_bf16", BF16, BF16),
                                                     ("xeon_sapphire_rapids_amx", BF16, BF16),
                                                     ("xeon_avx512_no_bf16", BF16, F32),
                                                     ("epyc_zen3_avx2", F32, F32)])
def test_each_cpu_kind_gets_its_prefill_dtype_and_keeps_int4_decode(kind: str, dtype: torch.dtype,
                                                                    wide: torch.dtype) -> None:
    """Prefill matmuls in bfloat16 only with bfloat16 dot products; the AVX-512 Xeon without them keeps bfloat16
    storage (the fused native decode builds there) under float32 prefill matmuls; the AVX2 EPYC is float32."""
    path = choose("cpu", "auto", "auto", _kind(kind))
    assert path.dtype == dtype and path.wide_dtype == wide and path.int4_decode, path
    assert path.short == ("fp32" if wide == F32 else "bf16")
    assert ("no bfloat16" in path.reason) == (wide == F32), path.reason
    assert _kind(kind).native_kernels == ("avx512f" in KINDS[kind])
    # the wide matmuls on the VNNI integer kernel exactly where they would otherwise be float32 beside a
    # bfloat16 model (the AVX-512 Xeon without BF16); the AVX2 EPYC has no native library to run it
    vnni = kind == "xeon_avx512_no_bf16"
    assert path.prefill_gemm == ("vnni_i16" if vnni else ""), path
    assert path.prefill_label == ("vnni_i16" if vnni else path.short)
    assert ("int16 VNNI prefill matmuls" in path.reason) == vnni, path.reason


def test_the_prefill_gemm_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LLMTRACE_PREFILL_GEMM``: float32 keeps the float32 matmuls where the integer kernel is the default,
    int16 takes it where the native library builds (a BF16 CPU too, to measure it), never where it does not
    build, never under ``--dtype`` by name; a value it does not know is an error."""
    xeon, zen4, zen3 = _kind("xeon_avx512_no_bf16"), _kind("epyc_zen4_avx512_bf16"), _kind("epyc_zen3_avx2")
    monkeypatch.setenv("LLMTRACE_PREFILL_GEMM", "float32")
    off = choose("cpu", "auto", "auto", xeon)
    assert off.prefill_gemm == "" and off.wide_dtype == F32 and "float32 prefill matmuls" in off.reason
    monkeypatch.setenv("LLMTRACE_PREFILL_GEMM", "int16")
    forced_bf16 = choose("cpu", "auto", "auto", zen4)
    assert forced_bf16.prefill_gemm == "vnni_i16" and forced_bf16.wide_dtype == BF16, forced_bf16
    assert "LLMTRACE_PREFILL_GEMM=int16" in forced_bf16.reason
    assert choose("cpu", "auto", "auto", zen3).prefill_gemm == ""
    assert choose("cpu", "float32", "auto", xeon).prefill_gemm == ""
    assert choose("cpu", "bfloat16", "auto", xeon).prefill_gemm == ""
    monkeypatch.setenv("LLMTRACE_PREFILL_GEMM", "int8")
    with pytest.raises(ValueError, match="LLMTRACE_PREFILL_GEMM"):
        choose("cpu", "auto", "auto", xeon)


def test_native_off_names_no_integer_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LLMTRACE_NATIVE=0`` leaves the native library unloaded, so the integer prefill kernel cannot run: the
    chosen path and its reason say float32 matmuls (they named the int16 kernel the engine could not use), even
    with ``LLMTRACE_PREFILL_GEMM=int16``."""
    xeon = _kind("xeon_avx512_no_bf16")
    monkeypatch.setenv("LLMTRACE_NATIVE", "0")
    for gemm in ("auto", "int16"):
        monkeypatch.setenv("LLMTRACE_PREFILL_GEMM", gemm)
        path = choose("cpu", "auto", "auto", xeon)
        assert path.prefill_gemm == "" and path.prefill_label == "fp32", path
        assert "int16" not in path.reason and "float32 prefill matmuls" in path.reason, path.reason


def test_dtype_and_decode_stay_overrides() -> None:
    bf16_cpu = _kind("epyc_zen4_avx512_bf16")
    assert choose("cpu", "float32", "auto", bf16_cpu).dtype == torch.float32
    assert not choose("cpu", "float32", "auto", bf16_cpu).int4_decode  # float32 by name: the reference math
    assert choose("cpu", "float32", "int4", bf16_cpu).int4_decode  # the int4 decode whatever the prefill dtype
    assert choose("cpu", "bfloat16", "auto", _kind("epyc_zen3_avx2")).dtype == torch.bfloat16
    assert not choose("cpu", "auto", "dense", bf16_cpu).int4_decode
    xeon = _kind("xeon_avx512_no_bf16")
    assert choose("cpu", "bfloat16", "auto", xeon).wide_dtype == BF16  # bfloat16 by name: bfloat16 throughout
    dense = choose("cpu", "auto", "dense", xeon)  # no int4 decode to keep: the plain float32 model
    assert dense.dtype == dense.wide_dtype == F32 and not dense.int4_decode
    gpu = choose("cuda", "auto", "auto", bf16_cpu)
    assert gpu.dtype == torch.bfloat16 and not gpu.int4_decode and gpu.features is None
    with pytest.raises(ValueError, match="dtype"):
        choose("cpu", "float16")
    with pytest.raises(ValueError, match="decode"):
        EngineConfig(decode="int8")


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Set LLMTRACE_CPU_PATH as a fresh process would see it: detection and the native library start over
    (put back afterwards, with the process's own library)."""
    def force(value: str) -> CpuFeatures:
        monkeypatch.setenv(cpu_features.ENV, value)
        cpu_features.detect.cache_clear()
        cpu_native.has_bf16_dot.cache_clear()
        for name, first in (("_tried", False), ("_lib", None), ("load_error", ""), ("_gemv_tried", False),
                            ("_gemv", None), ("gemv_error", "")):
            monkeypatch.setattr(cpu_native, name, first)
        return cpu_features.detect()

    yield force
    monkeypatch.undo()
    cpu_features.detect.cache_clear()
    cpu_native.has_bf16_dot.cache_clear()


def test_forced_paths_hide_bf16_and_avx512(forced) -> None:  # noqa: ANN001
    host = forced("auto")
    nobf16 = forced("nobf16")
    assert not nobf16.bf16_dot and nobf16.forced == "nobf16"
    assert nobf16.flags | nobf16.hidden == host.flags  # hides, never adds
    assert nobf16.avx512 == host.avx512  # only bfloat16 (and AMX) go
    avx2 = forced("avx2")
    assert not avx2.avx512 and not avx2.native_kernels and not any(f.startswith("avx512") for f in avx2.flags)
    assert avx2.isa in ("avx2", "baseline")
    assert choose("cpu", "auto").dtype == F32  # no AVX-512: float32 throughout
    no_bf16 = choose("cpu", "auto", features=nobf16)  # both forced paths prefill in float32
    assert no_bf16.wide_dtype == F32 and (no_bf16.dtype == BF16) == nobf16.native_kernels, no_bf16
    assert cpu_native.load() is None and "lacks AVX-512" in cpu_native.load_error
    if {"avx2", "fma", "f16c"} <= avx2.flags:  # the AVX2 GEMV serves the decode matmuls instead
        assert cpu_native.gemv_library() is not None, cpu_native.gemv_error
    with pytest.raises(ValueError, match="LLMTRACE_CPU_PATH"):
        forced("avx9000")


def _decode_logits(model: LlamaModel, prompts: list[list[int]], steps: int) -> list[torch.Tensor]:
    """Logits of ``steps`` decode steps of all prompts together (fixed next tokens: the same inputs for every
    model), after each prompt's prefill, through the paged forward."""
    h = PagedHarness(model, num_blocks=128, block_size=4, seed=1)
    seqs = [h.new_sequence(p + [0] * steps) for p in prompts]
    for s, p in zip(seqs, prompts, strict=True):
        s.token_ids = list(p)
        h.step([(s, len(p))])
    out = []
    for _ in range(steps):
        for s in seqs:
            s.token_ids.append(int(100 + len(s.token_ids)))
        out.append(torch.cat(h.step([(s, 1) for s in seqs])).float())
    return out


@pytest.mark.parametrize("path", ["auto", "nobf16"])
def test_each_path_decodes_as_close_to_float32_as_bfloat16(path: str, forced, gguf_path: Path, tokenizer,  # noqa: ANN001
                                                          real_f32: LlamaModel, real_bf16: LlamaModel) -> None:
    """The real model on this CPU's path and on the forced no-bfloat16 path: greedy decode logits no further from
    the float32 reference than the bfloat16 engine's, the same next tokens nearly always, and the path named."""
    features = forced(path)
    compute = choose("cpu", "auto")
    model = LlamaModel.from_gguf_path(GGUFModelFile(gguf_path), compute)
    prefill, decode = model.path_labels()
    assert prefill.startswith(f"{compute.prefill_label}_gemm+")
    if not features.bf16_dot:
        assert compute.wide_dtype == F32 and all(lw.qkv.weight.dtype == F32 for lw in model.weights.layers)
        if features.native_kernels:  # bfloat16 storage under the integer VNNI prefill matmuls (float32 weights
            # kept beside): the fused decode kept, the native attention in float32 products
            assert compute.dtype == BF16 and decode == "native_fused_q4", (decode, cpu_native.load_error)
            assert prefill == "vnni_i16_gemm+native_f32_attention", prefill
        else:
            assert prefill == "fp32_gemm+sdpa", (prefill, features.isa)
    assert decode in ("native_fused_q4", "native_q4_gemv", "int4", "int4_bf16_rows"), decode
    assert (decode == "native_fused_q4") == (model.native_decode is not None), decode
    assert decode.startswith("native") == (cpu_native.gemv_library() is not None), (decode, cpu_native.gemv_error)
    prompts = [tokenizer.encode(t) for t in ("The capital of France is", "def add(a, b):\n    return",
                                             "Once upon a time, in a small village by the sea,")]
    got = _decode_logits(model, prompts, 3)
    want = _decode_logits(real_f32, prompts, 3)
    bf16 = _decode_logits(real_bf16, prompts, 3)
    assert len(got) == len(want) == len(bf16) == 3
    err = max((a - b).abs().max().item() for a, b in zip(got, want, strict=True))
    ref_err = max((a - b).abs().max().item() for a, b in zip(bf16, want, strict=True))
    assert err <= 1.25 * ref_err, (err, ref_err)
    agree = sum(int((a.argmax(1) == b.argmax(1)).sum()) for a, b in zip(got, want, strict=True))
    assert agree >= 8  # of 9 next-token choices (near ties may flip with bfloat16 activations)


def test_the_trace_and_stats_name_the_path(tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    """The chosen path is a value on forward.prefill and forward.decode, and in the engine's stats line."""
    model, _ = load_model("tiny", "auto")
    engine = Engine.from_model(model, tokenizer, EngineConfig(dtype="auto", num_blocks=64))
    assert engine.config.dtype == model.compute_path.dtype_name
    prefill, decode = model.path_labels()
    db = tmp_path / "t.duckdb"
    llmtrace.init(db=db, service_name="path-test", strict=True)
    try:
        span = rec.start_pass("tiny-llama", side="server")
        run_all(engine, [EngineRequest("a", list(range(300, 340)), greedy(3), pass_span=span)])
        span.end()
    finally:
        llmtrace.shutdown()
    con = duckdb.connect(str(db), read_only=True)
    rows = dict(con.execute("SELECT name, attributes FROM spans WHERE name IN (?, ?)",
                            [S.FORWARD_PREFILL, S.FORWARD_DECODE]).fetchall())
    assert json.loads(rows[S.FORWARD_PREFILL])[N.PREFILL_PATH] == prefill
    assert json.loads(rows[S.FORWARD_DECODE])[N.DECODE_PATH] == decode == f"{model.compute_path.short}_dense"
    summary = engine.stats()["compute_path"]
    assert summary.startswith(f"prefill={prefill} decode={decode} cpu=")


def test_serve_names_the_path_in_its_ready_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``llmtrace serve`` under the forced no-bfloat16 path: its ready line and /stats say which path
    computes (float32 prefill, whatever this CPU is) and that it was forced."""
    import httpx
    from testkit import start_server, stop_server

    monkeypatch.setenv(cpu_features.ENV, "nobf16")  # the server process reads it
    server = start_server(tmp_path, model="tiny")
    try:
        deadline = time.monotonic() + 30
        while "compute prefill=" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        line = next((ln for ln in server.log().splitlines() if "listening on" in ln), "")
        # the integer VNNI matmuls where the native library builds (AVX-512), else float32 ones
        gemm = "vnni_i16" if cpu_features.detect().native_kernels else "fp32"
        assert re.search(rf"compute prefill={gemm}_gemm\+\S+ decode=fp32_dense cpu=\S+ forced=nobf16\)", line), line
        stats = httpx.get(f"{server.base_url}/stats", timeout=10).json()
        assert f"prefill={gemm}_gemm+" in json.dumps(stats) and "forced=nobf16" in json.dumps(stats)
    finally:
        stop_server(server)


def _exact(codes: np.ndarray, scale: np.ndarray, minimum: np.ndarray | None = None) -> torch.Tensor:
    blocks = codes.astype(np.float64).reshape(codes.shape[0], -1, 32) * scale[..., None]
    if minimum is not None:
        blocks = blocks + minimum[..., None]
    return torch.from_numpy(blocks.reshape(codes.shape))


@pytest.mark.parametrize("path", ["auto", "avx2"])
def test_gemv_on_the_exact_gguf_codes_on_each_path(path: str, forced, gguf_path: Path) -> None:  # noqa: ANN001
    """The decode GEMV on this CPU's path (AVX-512 where the full library builds) and on the forced AVX2 path
    (``cpu_gemv_avx2.c``, which every x86-64 CPU of the last decade runs): the GGUF's Q4_1 and Q8_0 codes against
    the exact float64 product, 1 to 13 rows (one 8-row pass, then the rest), float32 and bfloat16 sides."""
    features = forced(path)
    if not {"avx2", "fma", "f16c"} <= features.flags:
        pytest.fail(f"this CPU has no AVX2/FMA/F16C ({features.isa}): no native GEMV on any path")
    assert cpu_native.gemv_library() is not None, cpu_native.gemv_error
    assert (cpu_native.load() is not None) == (path == "auto" and features.native_kernels)
    gguf = GGUFModelFile(gguf_path)
    q4 = gguf.q4_1_parts("blk.3.ffn_down.weight")
    q8 = gguf.q8_0_parts("token_embd.weight")
    assert q4 is not None and q8 is not None
    cases = [(cpu_native.q4_1_weight(q4.codes, q4.scale, q4.minimum), _exact(q4.codes, q4.scale, q4.minimum)),
             (cpu_native.q8_0_weight(q8.codes[:4096], q8.scale[:4096]), _exact(q8.codes[:4096], q8.scale[:4096]))]
    gen = torch.Generator().manual_seed(3)
    for weight, exact in cases:
        assert weight is not None
        for rows in (1, 3, 8, 13):
            x = torch.randn(rows, weight.k, generator=gen)
            want = x.double() @ exact.T
            got = cpu_native.quant_matmul(weight, x, torch.float32)
            assert got is not None and got.shape == want.shape
            # x as int16 codes of one scale per row: within 2^-12 of the row's largest output
            assert ((got.double() - want).abs().max(1).values <= want.abs().max(1).values * 2**-12).all(), rows
            half = cpu_native.quant_matmul(weight, x.bfloat16(), torch.bfloat16)
            ref = x.bfloat16().double() @ exact.T  # the rows as given; out rounded once: a bfloat16 step
            assert half is not None
            assert ((half.double() - ref).abs().max(1).values <= ref.abs().max(1).values * 2**-7).all(), rows


def test_float32_paged_decode_attention_reads_pages_in_place() -> None:
    """The AVX2 decode attention over a float32 paged cache (a float32 model's decode steps): scattered pages,
    lengths 1 to 500 (not multiples of 8 or of the block), rows picked out of the table, against float64."""
    if cpu_native.avx2_library() is None:
        pytest.fail(f"no AVX2 library on this CPU: {cpu_native.gemv_error}")
    gen = torch.Generator().manual_seed(4)
    lens, bs = [37, 500, 1, 130], 16
    num_blocks = sum(-(-n // bs) for n in lens) + 4
    perm = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(lens), max(-(-n // bs) for n in lens), dtype=torch.int32)
    used = 0
    for i, n in enumerate(lens):
        tables[i, : -(-n // bs)] = perm[used : used + -(-n // bs)].int()
        used += -(-n // bs)
    kc, vc = torch.randn(num_blocks, bs, 3, 64, generator=gen), torch.randn(num_blocks, bs, 3, 64, generator=gen)
    q = torch.randn(3, 9, 64, generator=gen)
    rows = torch.tensor([3, 1, 2])  # query row i attends over table row rows[i]
    got = cpu_native.paged_decode_f32(q, kc, vc, tables, torch.tensor(lens, dtype=torch.int32), rows, 500, 0.125)
    assert got is not None
    for i, row in enumerate(rows.tolist()):
        blocks = tables[row, : -(-lens[row] // bs)].long()
        k = kc[blocks].reshape(-1, 3, 64)[: lens[row]].double()
        v = vc[blocks].reshape(-1, 3, 64)[: lens[row]].double()
        probs = torch.softmax(torch.einsum("hgd,lhd->hgl", q[i].double().view(3, 3, 64), k) * 0.125, dim=-1)
        want = torch.einsum("hgl,lhd->hgd", probs, v).reshape(9, 64)
        assert (got[i].double() - want).abs().max().item() < 1e-5, row
    assert cpu_native.paged_decode_f32(q.bfloat16(), kc, vc, tables, torch.tensor(lens, dtype=torch.int32), rows,
                                       500, 0.125) is None  # a bfloat16 query is not its input
