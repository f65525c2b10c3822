"""Benchmark `gpu_kernels`: the Triton paged-attention kernels on a CUDA GPU — correct first, then fast.

Run on a GPU machine: ``python benchmarks/gpu_kernels.py`` (add ``--quick`` to skip the tuning sweep).
Without CUDA it prints that it needs a GPU and writes nothing. ``--cpu-interpret`` is a smoke run of the
whole script on CPU through Triton's interpreter with tiny shapes; it writes only where ``--out`` says.

1. Correctness on the device, against a dense float64 reference: decode (fp32, bf16), prefill over a
   cached prefix, a mixed step through ``TritonPagedAttention.forward``, RMSNorm and rotary; batch
   invariance of decode (a sequence alone vs inside a batch: bitwise) and chunking invariance of the
   invariant mode (bitwise).
2. Device copy bandwidth: ``dst.copy_(src)`` on 1 GiB buffers, counted as read + write bytes.
3. Paged decode, Llama-3-8B attention shape (32 query heads, 8 KV heads, head dim 128, bf16, 16-token
   pages scattered at random), batch 1/16/64 x KV length 1k/8k/32k, against
   - ``torch_reference``: the engine's torch backend (gather + grouped matmuls, fp32 softmax);
   - ``sdpa``: gather the paged KV into ``[B, L, KVH, D]``, then ``scaled_dot_product_attention`` with
     the query heads of a GQA group laid out as query rows of their KV head (no head expansion). This
     is what using SDPA with a paged cache costs, and ``paged_decode_speedup_vs_sdpa_*`` uses it;
   - ``sdpa_contiguous``: SDPA alone over KV that is already contiguous (the gather not counted) — a
     lower bound no paged cache gets for free; reported as ``*_speedup_vs_sdpa_contiguous_*``.
   Times are CUDA-event medians after warm-up, with L2 flushed before each repetition. Achieved
   bandwidth counts the K/V bytes the kernel must read; its fraction is against the measured copy
   bandwidth.
4. A small sweep of decode tuning knobs (split size, tile, warps) at batch 64 / KV 8k, for choosing
   defaults; the headline numbers use the defaults.
5. Prefill/extend and RMSNorm timings for information.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

NAME = "gpu_kernels"
TARGET_SPEEDUP = 1.5
TARGET_BW_FRACTION = 0.6


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cpu-interpret", action="store_true", help="tiny smoke run on CPU under TRITON_INTERPRET=1")
    ap.add_argument("--quick", action="store_true", help="skip the tuning sweep")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here instead of results/gpu_kernels.json")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    saved_flag = os.environ.get("TRITON_INTERPRET")
    if args.cpu_interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # must precede the first `import triton`
    try:
        return _run(args)
    finally:
        if saved_flag is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_flag


def _run(args: argparse.Namespace) -> int:
    import torch

    if not args.cpu_interpret and not torch.cuda.is_available():
        print(f"{NAME}: needs a CUDA GPU and none is visible; nothing measured, nothing written. "
              "(`--cpu-interpret` runs a CPU smoke test of this script through Triton's interpreter.)")
        return 0
    try:
        import triton
    except Exception as exc:  # noqa: BLE001 - report any failure to load Triton the same way
        print(f"{NAME}: Triton is not importable ({exc}); install it with pip install 'llmtrace-stages[gpu]'. "
              "Nothing written.")
        return 2
    bench = Bench(args, torch, triton)
    try:
        bench.run()
    finally:
        bench.write()  # whatever was measured, with the errors that stopped the rest
    return 0 if bench.results.get("all_correct") else 1


class Bench:
    """Collects results section by section; a failing section is recorded and the rest still run."""

    def __init__(self, args: argparse.Namespace, torch, triton) -> None:  # noqa: ANN001
        self.args = args
        self.torch = torch
        self.triton = triton
        self.smoke = args.cpu_interpret
        self.device = "cpu" if self.smoke else "cuda"
        self.results: dict[str, object] = {}
        self.errors: list[str] = []
        self.started = time.perf_counter()
        if self.smoke:
            self.shape = {"heads": 4, "kv_heads": 2, "head_dim": 16, "page": 4}
            self.batches, self.kv_lens = (1, 2), (16, 40)
            self.dtype = torch.float32  # the interpreter's bf16 is emulated (truncating casts)
            self.decode_kw = {"split_size": 16, "block_n": 16}
        else:
            self.shape = {"heads": 32, "kv_heads": 8, "head_dim": 128, "page": 16}
            self.batches, self.kv_lens = (1, 16, 64), (1024, 8192, 32768)
            self.dtype = torch.bfloat16
            self.decode_kw = {}
        self.flush_buf = None

    # ---------------------------------------------------------------------------------------- driver

    def run(self) -> None:
        torch = self.torch
        self.results["device"] = "cpu (Triton interpreter smoke run)" if self.smoke else torch.cuda.get_device_name()
        self.results["torch_version"] = torch.__version__
        self.results["triton_version"] = self.triton.__version__
        self.results["shape"] = (
            f"heads={self.shape['heads']} kv_heads={self.shape['kv_heads']} head_dim={self.shape['head_dim']} "
            f"page={self.shape['page']} dtype={str(self.dtype).removeprefix('torch.')}"
        )
        from llmtrace.backend.kernels.triton_decode import DEFAULT_SPLIT_SIZE, decode_config
        from llmtrace.backend.kernels.triton_prefill import prefill_config

        block_n, warps = decode_config(self.dtype, self.shape["head_dim"])
        split = self.decode_kw.get("split_size", DEFAULT_SPLIT_SIZE)
        block_n = self.decode_kw.get("block_n", block_n)
        self.results["paged_decode_config"] = f"split={split} block_n={block_n} warps={warps}"
        block_m, block_n, warps = prefill_config(self.dtype, self.shape["head_dim"])
        self.results["paged_prefill_config"] = f"block_m={block_m} block_n={block_n} warps={warps}"
        sections: list[tuple[str, Callable[[], None]]] = [
            ("correctness", self.correctness),
            ("copy_bandwidth", self.copy_bandwidth),
            ("decode", self.decode_timings),
            ("sweep", self.sweep),
            ("prefill", self.prefill_timing),
            ("rms_norm", self.norm_timing),
        ]
        for name, fn in sections:
            if name == "sweep" and self.args.quick:
                continue
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - keep measuring the other sections
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                traceback.print_exc()
            finally:
                if not self.smoke:
                    torch.cuda.empty_cache()
            print(f"[{NAME}] {name} done in {time.perf_counter() - t0:.1f}s", flush=True)
        self.summarise()

    def summarise(self) -> None:
        r = self.results
        r["errors"] = "; ".join(self.errors) if self.errors else ""
        r["status"] = "complete" if not self.errors else "partial (see errors)"
        if not self.smoke:
            speed = r.get("paged_decode_speedup_vs_sdpa_b64_kv8k")
            frac = r.get("paged_decode_bw_fraction_b64_kv8k")
            r["target_speedup_vs_sdpa_b64_kv8k"] = TARGET_SPEEDUP
            r["target_bw_fraction_b64_kv8k"] = TARGET_BW_FRACTION
            if isinstance(speed, float) and isinstance(frac, float):
                r["targets_met"] = bool(speed >= TARGET_SPEEDUP and frac >= TARGET_BW_FRACTION and r.get("all_correct"))
        r["wall_s"] = round(time.perf_counter() - self.started, 1)

    def write(self) -> None:
        if self.args.out is not None:
            from common import machine

            out = {**self.results, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            self.args.out.parent.mkdir(parents=True, exist_ok=True)
            self.args.out.write_text(json.dumps(out, indent=2) + "\n")
            print(json.dumps(out, indent=2))
        elif self.smoke:
            print(json.dumps(self.results, indent=2))
            print(f"{NAME}: smoke run, nothing written (pass --out PATH to keep it)")
        else:
            from common import save

            save(NAME, self.results)

    # --------------------------------------------------------------------------------------- helpers

    def paged(self, seq_lens: list[int], query_lens: list[int], dtype, seed: int = 0, *, heads=None, kv_heads=None,
              head_dim=None, page=None):  # noqa: ANN001, ANN202
        """Random q and paged caches with blocks scattered at random, as the engine lays them out."""
        torch = self.torch
        heads = heads or self.shape["heads"]
        kv_heads = kv_heads or self.shape["kv_heads"]
        head_dim = head_dim or self.shape["head_dim"]
        page = page or self.shape["page"]
        gen = torch.Generator(device=self.device).manual_seed(seed)
        needed = [math.ceil(n / page) for n in seq_lens]
        num_blocks = sum(needed) + 1
        order = torch.randperm(num_blocks - 1, generator=gen, device=self.device) + 1
        tables = torch.zeros(len(seq_lens), max(needed), dtype=torch.int32, device=self.device)
        used = 0
        for i, n in enumerate(needed):
            tables[i, :n] = order[used : used + n].to(torch.int32)
            used += n
        shape = (num_blocks, page, kv_heads, head_dim)
        k_cache = torch.randn(shape, generator=gen, device=self.device).to(dtype)
        v_cache = torch.randn(shape, generator=gen, device=self.device).to(dtype)
        q = torch.randn((sum(query_lens), heads, head_dim), generator=gen, device=self.device).to(dtype)
        starts = [0]
        for n in query_lens:
            starts.append(starts[-1] + n)
        from llmtrace.backend.kernels.interface import AttentionMetadata

        slots = []
        for i, (length, n) in enumerate(zip(seq_lens, query_lens, strict=True)):
            pos = torch.arange(length - n, length, device=self.device)
            slots.append(tables[i, pos // page].long() * page + pos % page)
        meta = AttentionMetadata(
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=self.device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=self.device),
            block_tables=tables,
            slot_mapping=torch.cat(slots),
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            seq_lens_list=tuple(seq_lens),
            query_lens_list=tuple(query_lens),
        )
        return q, k_cache, v_cache, meta

    def dense(self, q, k_cache, v_cache, meta, scale: float):  # noqa: ANN001, ANN201
        """Float64 causal attention per sequence over its gathered K/V."""
        torch = self.torch
        page, kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = q.shape[1] // kv_heads
        out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
        qsl = meta.query_start_loc.tolist()
        for i, length in enumerate(meta.seq_lens_list):
            pos = torch.arange(length, device=q.device)
            blocks = meta.block_tables[i].long()[pos // page]
            k = k_cache[blocks, pos % page].double().repeat_interleave(group, dim=1)
            v = v_cache[blocks, pos % page].double().repeat_interleave(group, dim=1)
            qi = q[qsl[i] : qsl[i + 1]].double()
            n = qi.shape[0]
            scores = torch.einsum("thd,lhd->htl", qi, k) * scale
            q_pos = torch.arange(length - n, length, device=q.device)
            scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
            out[qsl[i] : qsl[i + 1]] = torch.einsum("htl,lhd->thd", scores.softmax(-1), v)
        return out

    @staticmethod
    def rel(out, ref) -> float:  # noqa: ANN001
        out64, ref64 = out.double(), ref.double()
        return float((out64 - ref64).norm() / ref64.norm())

    def time_ms(self, fn: Callable[[], object], reps: int | None = None, warmup: int = 3) -> float:
        """Median milliseconds of ``fn``; on CUDA by events, with L2 flushed before each repetition."""
        torch = self.torch
        reps = reps or (2 if self.smoke else self.args.reps)
        for _ in range(warmup if not self.smoke else 1):
            fn()
        if self.smoke:
            samples = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(samples)
        if self.flush_buf is None:
            self.flush_buf = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        events = []
        for _ in range(reps):
            self.flush_buf.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)

    # -------------------------------------------------------------------------------------- sections

    def correctness(self) -> None:
        from llmtrace.backend.kernels.triton_attention import TritonPagedAttention
        from llmtrace.backend.kernels.triton_decode import paged_decode_attention
        from llmtrace.backend.kernels.triton_norm_rotary import rms_norm, rotary_cos_sin, rotary_embedding

        torch, r = self.torch, self.results
        small = (
            {"split_size": 16, "decode_block_n": 16, "prefill_block_m": 16, "prefill_block_n": 16} if self.smoke else {}
        )
        backend = TritonPagedAttention(**small)
        ok = True
        dtypes = [torch.float32] if self.smoke else [torch.float32, torch.bfloat16]
        lens = [21, 5, 40] if self.smoke else [1000, 17, 4099, 256, 8191, 1]
        for dtype in dtypes:
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            tag = str(dtype).removeprefix("torch.").replace("float", "fp").replace("bfloat16", "bf16")
            q, kc, vc, meta = self.paged(lens, [1] * len(lens), dtype, seed=1)
            scale = q.shape[2] ** -0.5
            err = self.rel(backend.forward(q, kc, vc, meta, scale), self.dense(q, kc, vc, meta, scale))
            r[f"correct_decode_{tag}_rel_err"] = err
            ok &= err < tol
            spans = [(0, 20), (13, 17), (3, 1), (30, 9)] if self.smoke else [(0, 700), (3000, 129), (5, 1), (511, 2048)]
            q, kc, vc, meta = self.paged([a + b for a, b in spans], [b for _, b in spans], dtype, seed=2)
            out = backend.forward(q, kc, vc, meta, scale)
            err = self.rel(out, self.dense(q, kc, vc, meta, scale))
            r[f"correct_mixed_prefill_decode_{tag}_rel_err"] = err
            ok &= err < tol
            inv = TritonPagedAttention(invariant=True, **small).forward(q, kc, vc, meta, scale)
            err = self.rel(inv, self.dense(q, kc, vc, meta, scale))
            r[f"correct_invariant_mode_{tag}_rel_err"] = err
            ok &= err < tol

        # Decode batch invariance: each sequence alone vs inside the batch, bitwise.
        q, kc, vc, meta = self.paged(lens, [1] * len(lens), self.dtype, seed=3)
        scale = q.shape[2] ** -0.5
        together = backend.forward(q, kc, vc, meta, scale)
        same = True
        for i in range(len(lens)):
            ids = torch.tensor([i], dtype=torch.int32, device=self.device)
            alone = paged_decode_attention(
                q, kc, vc, meta.block_tables, meta.seq_lens, scale, max_seq_len=lens[i],
                query_start_loc=meta.query_start_loc, seq_ids=ids,
                **{"split_size": backend.split_size, "block_n": backend.decode_block_n},
            )
            same &= bool(torch.equal(alone[i], together[i]))
        r["batch_invariant_decode"] = same
        ok &= same

        # Invariant mode: one prompt prefilled whole vs in chunks of several sizes, bitwise.
        length = 48 if self.smoke else 3000
        q, kc, vc, meta = self.paged([length], [length], self.dtype, seed=4)
        inv_backend = TritonPagedAttention(invariant=True, **small)
        whole = inv_backend.forward(q, kc, vc, meta, scale)
        chunk_ok = True
        # Tile-aligned chunks only in the interpreter: numpy's BLAS rounds a row by its place in a tile.
        chunks = (16, 32) if self.smoke else (1, 7, 64, 1000)
        for chunk in chunks:
            pieces = []
            for start in range(0, length, chunk):
                end = min(start + chunk, length)
                sub = type(meta)(
                    query_start_loc=torch.tensor([0, end - start], dtype=torch.int32, device=self.device),
                    seq_lens=torch.tensor([end], dtype=torch.int32, device=self.device),
                    block_tables=meta.block_tables,
                    slot_mapping=meta.slot_mapping[start:end],
                    max_query_len=end - start,
                    max_seq_len=end,
                    seq_lens_list=(end,),
                    query_lens_list=(end - start,),
                )
                pieces.append(inv_backend.forward(q[start:end], kc, vc, sub, scale))
            chunk_ok &= bool(torch.equal(torch.cat(pieces), whole))
        r["invariant_mode_chunking_bitwise"] = chunk_ok
        ok &= chunk_ok

        # RMSNorm and rotary against float64 torch.
        gen = torch.Generator(device=self.device).manual_seed(5)
        x = torch.randn((64, 4096 if not self.smoke else 96), generator=gen, device=self.device)
        w = torch.randn(x.shape[1], generator=gen, device=self.device)
        ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
        err = self.rel(rms_norm(x, w, 1e-5), ref)
        r["correct_rms_norm_fp32_rel_err"] = err
        ok &= err < 1e-5
        dim = self.shape["head_dim"]
        qr = torch.randn((33, self.shape["heads"], dim), generator=gen, device=self.device)
        kr = torch.randn((33, self.shape["kv_heads"], dim), generator=gen, device=self.device)
        positions = torch.randint(0, 4000, (33,), generator=gen, device=self.device)
        cos, sin = rotary_cos_sin(4096, dim, device=self.device)
        angles = positions.double()[:, None] * (10000.0 ** (-torch.arange(0, dim, 2, device=self.device).double() / dim))
        emb = torch.cat((angles, angles), -1)[:, None, :]
        half = dim // 2
        rotated = torch.cat((-qr.double()[..., half:], qr.double()[..., :half]), -1)
        q_ref = qr.double() * emb.cos() + rotated * emb.sin()
        err = self.rel(rotary_embedding(qr, kr, positions, cos, sin)[0], q_ref)
        r["correct_rotary_neox_fp32_rel_err"] = err
        ok &= err < 1e-5
        r["all_correct"] = bool(ok)

    def copy_bandwidth(self) -> None:
        torch = self.torch
        nbytes = 16 * 2**20 if self.smoke else 2**30
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.device).random_(0, 255)
        dst = torch.empty_like(src)
        ms = self.time_ms(lambda: dst.copy_(src))
        self.copy_gbps = 2 * nbytes / (ms * 1e-3) / 1e9
        self.results["copy_bandwidth_gbps"] = round(self.copy_gbps, 1)

    def decode_case(self, batch: int, kv_len: int, methods: bool = True, **kernel_kw) -> dict[str, float]:  # noqa: ANN003
        """Times of one (batch, KV length) case, in ms, by method; a failing baseline is recorded, not fatal.

        With ``methods`` it also checks that every baseline computes what the kernel computes
        (``*_rel_err`` entries in the returned dict), so the comparison is like for like.
        """
        import torch.nn.functional as F

        from llmtrace.backend.kernels.triton_decode import paged_decode_attention

        q, kc, vc, meta = self.paged([kv_len] * batch, [1] * batch, self.dtype, seed=batch * 7 + kv_len)
        scale = q.shape[2] ** -0.5
        kw = {**self.decode_kw, **kernel_kw}

        def paged():  # noqa: ANN202
            return paged_decode_attention(
                q, kc, vc, meta.block_tables, meta.seq_lens, scale, max_seq_len=kv_len,
                query_start_loc=meta.query_start_loc, **kw,
            )

        times = {"paged_decode": self.time_ms(paged)}
        if not methods:
            return times
        page, kv_heads, dim = kc.shape[1], kc.shape[2], kc.shape[3]
        blocks = math.ceil(kv_len / page)
        tables = meta.block_tables[:, :blocks]
        group = q.shape[1] // kv_heads
        # GQA without expanding heads: a group's query heads become query rows of their KV head.
        q4 = q.view(batch, kv_heads, group, dim)

        def gathered():  # noqa: ANN202
            k = kc[tables].view(batch, blocks * page, kv_heads, dim)[:, :kv_len].transpose(1, 2)
            v = vc[tables].view(batch, blocks * page, kv_heads, dim)[:, :kv_len].transpose(1, 2)
            return k, v

        def sdpa():  # noqa: ANN202
            return F.scaled_dot_product_attention(q4, *gathered(), scale=scale).reshape(q.shape)

        flat: list = []

        def sdpa_contiguous():  # noqa: ANN202
            return F.scaled_dot_product_attention(q4, *flat, scale=scale).reshape(q.shape)

        def torch_reference():  # noqa: ANN202
            from llmtrace.backend.kernels.torch_reference import TorchPagedAttention

            reference = TorchPagedAttention()
            return lambda: reference.forward(q, kc, vc, meta, scale)

        expected = paged()
        for name, make in (
            ("torch_reference", torch_reference),
            ("sdpa", lambda: sdpa),
            ("sdpa_contiguous", lambda: (flat.extend(gathered()), sdpa_contiguous)[1]),
        ):
            try:
                fn = make()
                times[f"{name}_rel_err"] = self.rel(fn(), expected)
                times[name] = self.time_ms(fn)
            except Exception as exc:  # noqa: BLE001 - one baseline failing must not hide the others
                self.errors.append(f"decode b{batch} kv{kv_len} {name}: {type(exc).__name__}: {exc}")
        return times

    def decode_timings(self) -> None:
        r = self.results
        copy_gbps = getattr(self, "copy_gbps", None)
        for batch in self.batches:
            for kv_len in self.kv_lens:
                tag = f"b{batch}_kv{kv_len // 1024}k" if kv_len >= 1024 else f"b{batch}_kv{kv_len}"
                try:
                    times = self.decode_case(batch, kv_len)
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory in one baseline
                    self.errors.append(f"decode {tag}: {type(exc).__name__}: {exc}")
                    continue
                paged = times["paged_decode"]
                r[f"paged_decode_ms_{tag}"] = round(paged, 4)
                for name in ("torch_reference", "sdpa", "sdpa_contiguous"):
                    if name in times:
                        r[f"{name}_ms_{tag}"] = round(times[name], 4)
                        r[f"paged_decode_speedup_vs_{name}_{tag}"] = round(times[name] / paged, 3)
                    if f"{name}_rel_err" in times:
                        r[f"{name}_vs_paged_decode_rel_err_{tag}"] = float(f"{times[name + '_rel_err']:.3g}")
                kv_bytes = 2 * batch * kv_len * self.shape["kv_heads"] * self.shape["head_dim"] * self.elt_bytes()
                gbps = kv_bytes / (paged * 1e-3) / 1e9
                r[f"paged_decode_gbps_{tag}"] = round(gbps, 1)
                if copy_gbps:
                    r[f"paged_decode_bw_fraction_{tag}"] = round(gbps / copy_gbps, 3)
                shown = {k: v for k, v in times.items() if not k.endswith("_rel_err")}
                print(f"[{NAME}] decode {tag}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in shown.items()), flush=True)

    def elt_bytes(self) -> int:
        return self.torch.empty((), dtype=self.dtype).element_size()

    def sweep(self) -> None:
        batch, kv_len = (2, 40) if self.smoke else (64, 8192)
        grid = [(16, 16, 4)] if self.smoke else [
            (s, n, w) for s in (128, 256, 512) for n in (32, 64) for w in (4, 8)
        ]
        best = None
        for split, block_n, warps in grid:
            key = f"sweep_decode_ms_s{split}_n{block_n}_w{warps}"
            try:
                ms = self.decode_case(batch, kv_len, methods=False, split_size=split, block_n=block_n,
                                      num_warps=warps)["paged_decode"]
            except Exception as exc:  # noqa: BLE001 - a config that does not compile is itself a finding
                self.results[key] = f"failed: {type(exc).__name__}"
                continue
            self.results[key] = round(ms, 4)
            if best is None or ms < best[0]:
                best = (ms, key)
        if best is not None:
            self.results["sweep_best"] = best[1].removeprefix("sweep_decode_ms_")
            self.results["sweep_best_ms"] = round(best[0], 4)

    def prefill_timing(self) -> None:
        import torch.nn.functional as F

        from llmtrace.backend.kernels.triton_attention import TritonPagedAttention

        torch = self.torch
        batch, new, prefix = (2, 24, 20) if self.smoke else (8, 512, 7680)
        q, kc, vc, meta = self.paged([prefix + new] * batch, [new] * batch, self.dtype, seed=9)
        scale = q.shape[2] ** -0.5
        small = {"prefill_block_m": 16, "prefill_block_n": 16} if self.smoke else {}
        backend = TritonPagedAttention(**small)
        ms = self.time_ms(lambda: backend.forward(q, kc, vc, meta, scale))
        tag = f"b{batch}_q{new}_kv{prefix + new}"
        self.results[f"paged_prefill_ms_{tag}"] = round(ms, 4)
        page, kv_heads, dim = kc.shape[1], kc.shape[2], kc.shape[3]
        length = prefix + new
        blocks = math.ceil(length / page)
        k = kc[meta.block_tables[:, :blocks]].view(batch, blocks * page, kv_heads, dim)[:, :length].transpose(1, 2)
        v = vc[meta.block_tables[:, :blocks]].view(batch, blocks * page, kv_heads, dim)[:, :length].transpose(1, 2)
        qt = q.view(batch, new, q.shape[1], dim).transpose(1, 2)
        mask = torch.arange(length, device=self.device)[None, :] <= torch.arange(prefix, length, device=self.device)[:, None]
        sdpa_ms = self.time_ms(
            lambda: F.scaled_dot_product_attention(qt, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        )
        self.results[f"sdpa_prefill_contiguous_ms_{tag}"] = round(sdpa_ms, 4)

    def norm_timing(self) -> None:
        from llmtrace.backend.kernels.triton_norm_rotary import rms_norm

        torch = self.torch
        rows, hidden = (8, 64) if self.smoke else (4096, 4096)
        x = torch.randn((rows, hidden), device=self.device).to(self.dtype)
        res = torch.randn_like(x)
        w = torch.randn(hidden, device=self.device).to(self.dtype)

        def eager():  # noqa: ANN202
            h = x + res
            hf = h.float()
            return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype), h

        self.results[f"rms_norm_residual_ms_{rows}x{hidden}"] = round(self.time_ms(lambda: rms_norm(x, w, 1e-5, res)), 4)
        self.results[f"torch_eager_rms_norm_residual_ms_{rows}x{hidden}"] = round(self.time_ms(eager), 4)


if __name__ == "__main__":
    sys.exit(main())
