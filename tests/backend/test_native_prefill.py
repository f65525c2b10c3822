"""The native causal prefill attention (``backend/model/cpu_prefill.c``): scattered pages, chunks after a cached
prefix and mixed steps against a float64 reference, and the real model's bfloat16 prefill logits no further from
float32's than with torch's SDPA."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from paged_helpers import PagedHarness

from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.kernels.interface import AttentionMetadata
from llmtrace.backend.kernels.torch_reference import TorchPagedAttention
from llmtrace.backend.model import cpu_features, cpu_native
from llmtrace.backend.model.llama import LlamaModel


def _bf16_dot() -> bool:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "avx512_bf16" in flags.split()


@pytest.fixture(scope="module", autouse=True)
def native_lib() -> None:
    """The kernels run wherever the native library builds (AVX-512 F/BW/VNNI): on bfloat16 dot products where
    the CPU has them, else in float32 products (``prefill_attention_widened``); skipped only without AVX-512."""
    lib = cpu_native.load()
    if lib is None and _bf16_dot():
        pytest.fail(f"the native kernels should build on this CPU: {cpu_native.load_error}")
    if lib is None:
        pytest.skip(f"no native library on this machine: {cpu_native.load_error}")
    if _bf16_dot() and not lib.lt_has_bf16_dot() and cpu_features.detect().forced == "auto":
        pytest.fail("the CPU has AVX-512 BF16 but the prefill kernel was built without it")


@pytest.fixture(params=["host", "float32_products"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The prefill attention this CPU runs, and the float32-products variant that CPUs without bfloat16 dot
    products run (on any CPU with the library: it needs AVX-512F only)."""
    if request.param == "float32_products":
        monkeypatch.setattr(cpu_native, "has_bf16_dot", lambda: False)
    return str(request.param)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Query rows each native prefill call served (proves the kernel, not the fallback, answered)."""
    seen: list[int] = []
    real = cpu_native.paged_prefill

    def counted(q, *args):  # noqa: ANN001, ANN202
        out = real(q, *args)
        if out is not None:
            seen.append(q.shape[0])
        return out

    monkeypatch.setattr(cpu_native, "paged_prefill", counted)
    return seen


def _case(work: list[tuple[int, int]], block_size: int = 16, seed: int = 0):  # noqa: ANN202
    """Sequences (kv length, new tokens) over one shuffled bfloat16 cache, queries flat as the forward has them."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-length // block_size) for length, _ in work) + 8
    perm = torch.randperm(num_blocks, generator=gen)
    width = max(-(-length // block_size) for length, _ in work)
    tables = torch.zeros(len(work), width, dtype=torch.int32)
    used = 0
    for i, (length, _) in enumerate(work):
        nb = -(-length // block_size)
        tables[i, :nb] = perm[used : used + nb].int()
        used += nb
    k = torch.randn(num_blocks, block_size, 3, 64, generator=gen).bfloat16()
    v = torch.randn(num_blocks, block_size, 3, 64, generator=gen).bfloat16()
    qlens = [n for _, n in work]
    q = torch.randn(sum(qlens), 9, 64, generator=gen).bfloat16()
    meta = AttentionMetadata(
        query_start_loc=torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], dtype=torch.int32),
        seq_lens=torch.tensor([length for length, _ in work], dtype=torch.int32), block_tables=tables,
        slot_mapping=torch.zeros(sum(qlens), dtype=torch.long), max_query_len=max(qlens),
        max_seq_len=max(length for length, _ in work), seq_lens_list=tuple(length for length, _ in work),
        query_lens_list=tuple(qlens),
    )
    return q, k, v, meta


def _float64_truth(q, k, v, meta, scale: float) -> torch.Tensor:  # noqa: ANN001
    out, at = [], 0
    for i, (length, n) in enumerate(zip(meta.seq_lens_list, meta.query_lens_list, strict=True)):
        blocks = meta.block_tables[i, : -(-length // k.shape[1])].long()
        kk = k[blocks].reshape(-1, 3, 64)[:length].double().repeat_interleave(3, dim=1)
        vv = v[blocks].reshape(-1, 3, 64)[:length].double().repeat_interleave(3, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[at : at + n].double(), kk) * scale
        visible = torch.arange(length)[None, :] <= (length - n + torch.arange(n))[:, None]
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out.append(torch.einsum("hqk,khd->qhd", probs, vv))
        at += n
    return torch.cat(out)


@pytest.mark.parametrize("work", [
    [(37, 37)],  # a whole prompt off the block size
    [(300, 300)],
    [(130, 30)],  # a chunk after 100 cached tokens
    [(529, 5), (17, 17)],  # two chunks in one step
    [(64, 1), (90, 90), (200, 1)],  # a prefill between two decode rows (the decode kernel takes those)
])
def test_prefill_attention_reads_scattered_pages_causally(work: list[tuple[int, int]], calls: list[int],
                                                          kernel: str) -> None:
    """No further from float64 than torch's path (SDPA / grouped matmuls), every prefill chunk answered by the
    kernel, on each variant."""
    q, k, v, meta = _case(work)
    truth = _float64_truth(q, k, v, meta, 0.125)
    torch_path = TorchPagedAttention()
    torch_path.native = None
    reference = torch_path.forward(q, k, v, meta, 0.125)
    got = TorchPagedAttention().forward(q, k, v, meta, 0.125)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    err, ref_err = (got.double() - truth).abs().max().item(), (reference.double() - truth).abs().max().item()
    assert err <= 1.25 * ref_err + 1e-4, (err, ref_err)
    assert sorted(calls) == sorted(n for _, n in work if n > 1)


def test_two_threads_give_the_same_attention(kernel: str) -> None:
    """On two threads KV heads and row blocks are shared out (each thread its own score buffers): the same
    bits as on one."""
    q, k, v, meta = _case([(300, 300), (130, 30)], seed=4)
    one = TorchPagedAttention().forward(q, k, v, meta, 0.125)
    torch.set_num_threads(2)  # the autouse fixture puts it back
    two = TorchPagedAttention().forward(q, k, v, meta, 0.125)
    assert torch.equal(one, two)
    x = torch.randn(300, 576).bfloat16()
    w = torch.rand(576) + 0.5
    gu = torch.randn(300, 3072).bfloat16()
    norm2, act2 = cpu_native.rms_norm_rows(x, w, 1e-5), cpu_native.silu_mul_rows(gu)
    torch.set_num_threads(1)
    assert torch.equal(norm2, cpu_native.rms_norm_rows(x, w, 1e-5))
    assert torch.equal(act2, cpu_native.silu_mul_rows(gu))


def test_the_kernel_refuses_what_it_does_not_handle(kernel: str) -> None:
    """Another head size, a float32 cache or a table too short for the length: None (the torch path serves)."""
    q, k, v, meta = _case([(40, 40)])
    table = meta.block_tables[0]
    assert cpu_native.paged_prefill(q, k, v, table, 40, 0.125) is not None
    assert cpu_native.paged_prefill(q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous(),
                                    table, 40, 0.125) is None
    assert cpu_native.paged_prefill(q, k.float(), v.float(), table, 40, 0.125) is None
    assert cpu_native.paged_prefill(q, k, v, table[:1], 40, 0.125) is None


def _prefill_logits(model: LlamaModel, ids: list[int], chunks: list[int]) -> torch.Tensor:
    h = PagedHarness(model, num_blocks=64, block_size=16, seed=3)
    seq = h.new_sequence(ids)
    return torch.cat([h.step([(seq, n)])[0] for n in chunks])


def test_real_model_prefill_stays_as_close_to_float32(real_bf16: LlamaModel, real_f32: LlamaModel, tokenizer,
                                                      calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The real model's bfloat16 logits at every prompt position, whole and in two chunks (the second after a
    cached prefix), with the native attention, norm, activation and rotary: no further from float32's than the
    torch bfloat16 ops' (relative error over all logits; the largest single logit error is rounding noise
    either way), the same next tokens nearly always."""
    ids = tokenizer.encode(" ".join(f"Item {i}: a crate of {i * 7 % 13} apples left the depot." for i in range(12)))
    ids = ids[:150]
    random.Random(1).shuffle(ids[100:])  # a tail that is not a repeat of the head
    want = real_f32.forward_dense(ids)
    for chunks in ([150], [100, 50]):
        calls.clear()
        native = _prefill_logits(real_bf16, ids, chunks)
        assert calls == [n for n in chunks for _ in range(real_bf16.config.num_layers)]
        with monkeypatch.context() as m:
            m.setattr(cpu_native, "paged_prefill", lambda *a: None)  # every layer on torch's attention
            m.setattr(real_bf16, "_native_rows", False)  # and torch's norm, activation, rotary
            torch_ops = _prefill_logits(real_bf16, ids, chunks)
        rel = ((native - want).norm() / want.norm()).item()
        ref_rel = ((torch_ops - want).norm() / want.norm()).item()
        assert rel <= 1.1 * ref_rel, (chunks, rel, ref_rel)
        assert rel < 0.05
        agree = int((native.argmax(1) == want.argmax(1)).sum())
        ref_agree = int((torch_ops.argmax(1) == want.argmax(1)).sum())
        assert agree >= ref_agree - 3, (chunks, agree, ref_agree)


def test_engine_prefill_runs_native_and_records_it(real_bf16: LlamaModel, tokenizer, calls: list[int]) -> None:  # noqa: ANN001
    engine = Engine.from_model(real_bf16, tokenizer, EngineConfig(dtype="bfloat16", num_blocks=64))
    prompt = tokenizer.encode("List three rivers of Europe and one fact about each:")
    engine.add_request(EngineRequest("p", prompt, SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)))
    engine.step()
    assert engine.last_step.num_prefill_tokens == len(prompt)
    assert calls == [len(prompt)] * real_bf16.config.num_layers
    assert "prefill_bfloat16=native_paged" in engine.attention.backend.kernel_path


def test_row_kernels_match_the_torch_ops() -> None:
    """RMSNorm: torch's float32 norm rounded to bfloat16 (a row's sum may differ in order: at most one bfloat16
    step); silu(gate) * up: no further from float64 than torch's two bfloat16 ops; odd row counts."""
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(37, 576, generator=gen) * 4).bfloat16()
    w = torch.rand(576, generator=gen) + 0.5
    got = cpu_native.rms_norm_rows(x, w, 1e-5)
    want = torch.nn.functional.rms_norm(x.float(), (576,), w, 1e-5).bfloat16()
    assert got is not None and got.dtype == torch.bfloat16
    assert ((got.float() - want.float()).abs() <= want.float().abs() * 2**-7).all()
    gu = (torch.randn(37, 2 * 1536, generator=gen) * 3).bfloat16()
    act = cpu_native.silu_mul_rows(gu)
    ops = torch.nn.functional.silu(gu[:, :1536]) * gu[:, 1536:]
    truth = torch.nn.functional.silu(gu[:, :1536].double()) * gu[:, 1536:].double()
    assert act is not None and act.shape == (37, 1536)
    assert (act.double() - truth).abs().max() <= (ops.double() - truth).abs().max()
    assert cpu_native.rms_norm_rows(x.float(), w, 1e-5) is None  # float32 stays on torch


def test_rotary_in_place_is_the_models_rotary(real_bf16: LlamaModel) -> None:
    """The in-place rotary on fused QKV rows: the query and key heads rotated as the model's torch rotary
    does (no further from float64), the value heads untouched; positions past the tables are refused."""
    cfg = real_bf16.config
    gen = torch.Generator().manual_seed(2)
    qkv = (torch.randn(23, cfg.q_size + 2 * cfg.kv_size, generator=gen) * 2).bfloat16()
    positions = torch.randint(0, 2000, (23,), generator=gen)
    heads = cfg.num_heads + cfg.num_kv_heads
    qk = qkv[:, : heads * 64].view(23, heads, 64)
    cos2, sin2 = real_bf16._rope_tables(positions)
    ops = real_bf16._rope(qk, cos2, sin2)
    c = real_bf16._cos.index_select(0, positions).double()[:, None, :]
    s = real_bf16._sin.index_select(0, positions).double()[:, None, :]
    a, b = qk[..., :32].double(), qk[..., 32:].double()
    truth = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    got = qkv.clone()
    assert cpu_native.rope_rows(got, heads, positions, real_bf16._cos, real_bf16._sin)
    rotated = got[:, : heads * 64].view(23, heads, 64)
    assert (rotated.double() - truth).abs().max() <= (ops.double() - truth).abs().max()
    assert torch.equal(got[:, heads * 64 :], qkv[:, heads * 64 :])
    far = torch.full((23,), real_bf16._cos.shape[0], dtype=torch.long)
    assert not cpu_native.rope_rows(qkv.clone(), heads, far, real_bf16._cos, real_bf16._sin)
