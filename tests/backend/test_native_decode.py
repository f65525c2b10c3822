"""The native bfloat16 decode kernels (``backend/model/cpu_native``): paged attention, the GEMV on the exact
GGUF codes and the fused decode layers, checked against float64 / float32 references on the real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import cpu_can_build_native
from paged_helpers import PagedHarness

from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.kernels.interface import AttentionMetadata
from llmtrace.backend.kernels.torch_reference import TorchPagedAttention
from llmtrace.backend.model import cpu_native, linear, native_decode
from llmtrace.backend.model.gguf_reader import GGUFModelFile
from llmtrace.backend.model.llama import LlamaModel


@pytest.fixture(scope="module", autouse=True)
def native_lib() -> None:
    if cpu_native.load() is None:
        if cpu_can_build_native():
            pytest.fail(f"the native kernels should build on this CPU: {cpu_native.load_error}")
        pytest.skip(f"no native kernels on this machine: {cpu_native.load_error}")


def _attention_case(lens: list[int], block_size: int = 16, seed: int = 0):  # noqa: ANN202
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in lens) + 8
    perm = torch.randperm(num_blocks, generator=gen)
    width = max(-(-n // block_size) for n in lens)
    tables = torch.zeros(len(lens), width, dtype=torch.int32)
    used = 0
    for i, n in enumerate(lens):
        nb = -(-n // block_size)
        tables[i, :nb] = perm[used : used + nb].int()
        used += nb
    k = torch.randn(num_blocks, block_size, 3, 64, generator=gen).bfloat16()
    v = torch.randn(num_blocks, block_size, 3, 64, generator=gen).bfloat16()
    q = torch.randn(len(lens), 9, 64, generator=gen).bfloat16()
    meta = AttentionMetadata(
        query_start_loc=torch.arange(len(lens) + 1, dtype=torch.int32), seq_lens=torch.tensor(lens, dtype=torch.int32),
        block_tables=tables, slot_mapping=torch.zeros(len(lens), dtype=torch.long), max_query_len=1,
        max_seq_len=max(lens), seq_lens_list=tuple(lens), query_lens_list=(1,) * len(lens),
    )
    return q, k, v, meta


def _float64_attention(q, k, v, meta, scale: float) -> torch.Tensor:  # noqa: ANN001
    out = []
    for i, n in enumerate(meta.seq_lens_list):
        blocks = meta.block_tables[i, : -(-n // k.shape[1])].long()
        kk = k[blocks].reshape(-1, 3, 64)[:n].double()
        vv = v[blocks].reshape(-1, 3, 64)[:n].double()
        probs = torch.softmax(torch.einsum("hgd,lhd->hgl", q[i].double().view(3, 3, 64), kk) * scale, dim=-1)
        out.append(torch.einsum("hgl,lhd->hgd", probs, vv).reshape(9, 64))
    return torch.stack(out)


def test_paged_attention_reads_scattered_pages_in_place() -> None:
    """Batches of 1 and 5 sequences, lengths off the block size, pages shuffled: no further from float64 than
    the torch matmul path, and the mixed-batch row selection picks the right table rows."""
    for lens in ([37], [1, 16, 17, 300, 529]):
        q, k, v, meta = _attention_case(lens)
        truth = _float64_attention(q, k, v, meta, 0.125)
        torch_path = TorchPagedAttention()
        torch_path.native = None
        reference = torch_path.forward(q, k, v, meta, 0.125)
        got = TorchPagedAttention().forward(q, k, v, meta, 0.125)
        assert got.dtype == torch.bfloat16 and got.shape == q.shape
        err, ref_err = (got.double() - truth).abs().max().item(), (reference.double() - truth).abs().max().item()
        assert err <= ref_err + 1e-6, (lens, err, ref_err)
    rows = torch.tensor([3, 0], dtype=torch.long)
    sub = cpu_native.paged_decode(q[[3, 0]], k, v, meta.block_tables, meta.seq_lens, rows, 529, 0.125)
    assert sub is not None
    assert (sub.double() - truth[[3, 0]]).abs().max().item() < 0.02


def _exact(codes: np.ndarray, scale: np.ndarray, minimum: np.ndarray | None = None) -> torch.Tensor:
    value = codes.astype(np.float64).reshape(codes.shape[0], -1, 32) * scale[..., None]
    if minimum is not None:
        value = value + minimum[..., None]
    return torch.from_numpy(value.reshape(codes.shape))


@pytest.fixture(scope="module")
def gguf(gguf_path: Path) -> GGUFModelFile:
    return GGUFModelFile(gguf_path)


@pytest.mark.parametrize("rows", [1, 11])
def test_gemv_on_the_exact_gguf_codes(gguf: GGUFModelFile, rows: int) -> None:
    """Q4_1 (bfloat16 out) and Q8_0 (float32 out) against float64 over the exact dequantized weights, for one
    row and for more rows than one pass of the kernel takes (8)."""
    gen = torch.Generator().manual_seed(rows)
    q4 = gguf.q4_1_parts("blk.3.ffn_down.weight")
    w = cpu_native.q4_1_weight(q4.codes, q4.scale, q4.minimum)
    assert w is not None
    x = torch.randn(rows, w.k, generator=gen).bfloat16()
    want = x.double() @ _exact(q4.codes, q4.scale, q4.minimum).T
    got = cpu_native.quant_matmul(w, x, torch.bfloat16)
    assert got is not None and got.dtype == torch.bfloat16
    # bfloat16's own rounding of the result (2^-9 relative) plus x's int16 step: well inside 2^-7
    assert ((got.double() - want).abs() <= want.abs() * 2**-7 + 1e-3 * want.abs().max()).all()
    q8 = gguf.q8_0_parts("token_embd.weight")
    codes, scale = q8.codes[:4096], q8.scale[:4096]
    w8 = cpu_native.q8_0_weight(codes, scale)
    assert w8 is not None
    x8 = torch.randn(rows, w8.k, generator=gen).bfloat16()
    want8 = x8.double() @ _exact(codes, scale).T
    got8 = cpu_native.quant_matmul(w8, x8, torch.float32)
    assert got8 is not None and got8.dtype == torch.float32
    assert (got8.double() - want8).abs().max().item() < 1e-3 * want8.abs().max().item()
    assert torch.equal(got8.argmax(dim=1), want8.argmax(dim=1))
    # over two threads (torch's OpenMP setting reaches the kernel) each tile is computed exactly as on one
    torch.set_num_threads(2)
    assert torch.equal(cpu_native.quant_matmul(w, x, torch.bfloat16), got)
    assert torch.equal(cpu_native.quant_matmul(w8, x8, torch.float32), got8)


def _decode_logits(model: LlamaModel, prompts: list[list[int]], steps: int) -> list[torch.Tensor]:
    h = PagedHarness(model, num_blocks=128, block_size=4, seed=1)
    seqs = [h.new_sequence(p + [0] * steps) for p in prompts]
    for s, p in zip(seqs, prompts, strict=True):
        s.token_ids = list(p)
        h.step([(s, len(p))])
    out = []
    for _ in range(steps):
        for s in seqs:
            s.token_ids.append(int(100 + len(s.token_ids)))
        logits = h.step([(s, 1) for s in seqs])
        out.append(torch.cat(logits))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_decode_layers_run_and_stay_as_close_to_float32(real_bf16: LlamaModel, real_f32: LlamaModel,
                                                              tokenizer, monkeypatch, threads: int) -> None:  # noqa: ANN001
    """Batched decode steps of the real model through the fused layers: they run (one call per layer half),
    and their logits are no further from float32's than the torch bfloat16 ops' are, on one thread and on two
    (rows of a step then attend in parallel, weight tiles split between the threads)."""
    torch.set_num_threads(threads)
    assert real_bf16.native_decode is not None
    prompts = [tokenizer.encode(t) for t in ("The capital of France is", "def add(a, b):\n    return",
                                             "Once upon a time, in a small village by the sea,")]
    calls = {"attention": 0, "mlp": 0}
    real_attention, real_mlp = native_decode.NativeStep.attention, native_decode.NativeStep.mlp

    def attention(self, *args):  # noqa: ANN001, ANN202
        calls["attention"] += 1
        return real_attention(self, *args)

    def mlp(self, *args):  # noqa: ANN001, ANN202
        calls["mlp"] += 1
        return real_mlp(self, *args)

    monkeypatch.setattr(native_decode.NativeStep, "attention", attention)
    monkeypatch.setattr(native_decode.NativeStep, "mlp", mlp)
    fused = _decode_logits(real_bf16, prompts, 3)
    layers = real_bf16.config.num_layers
    assert calls == {"attention": 3 * layers, "mlp": 3 * layers}  # decode steps only; prefill ran the torch ops
    want = _decode_logits(real_f32, prompts, 3)
    monkeypatch.setattr(real_bf16, "native_decode", None)
    monkeypatch.setattr(linear, "NATIVE_MAX_ROWS", 0)
    torch_ops = _decode_logits(real_bf16, prompts, 3)
    err = max((a - b).abs().max().item() for a, b in zip(fused, want, strict=True))
    ref_err = max((a - b).abs().max().item() for a, b in zip(torch_ops, want, strict=True))
    assert err <= 1.25 * ref_err, (err, ref_err)
    agree = sum(int((a.argmax(1) == b.argmax(1)).sum()) for a, b in zip(fused, want, strict=True))
    assert agree >= 8  # of 9 next-token choices (near ties may flip in bfloat16)


def test_engine_bf16_decode_keeps_its_sections(real_bf16: LlamaModel, tokenizer) -> None:  # noqa: ANN001
    """On the fused path a decode step still times attention, feed_forward and lm_head separately."""
    engine = Engine.from_model(real_bf16, tokenizer, EngineConfig(dtype="bfloat16", num_blocks=64))
    prompt = tokenizer.encode("Name three colors:")
    engine.add_request(EngineRequest("s", prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)))
    engine.step()  # prefill
    engine.step()  # one decode step
    sections = engine.last_step.sections_ms
    assert engine.last_step.num_decode_seqs == 1 and engine.last_step.num_prefill_tokens == 0
    for name in ("attention", "feed_forward", "lm_head"):
        assert sections[name] > 0, sections
    assert "decode_bfloat16=native_paged" in engine.attention.backend.kernel_path
