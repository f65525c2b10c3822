"""Benchmark `prefill_gemm`: the engine's cold 1,000-token prefill with its wide matmuls on the integer VNNI
kernel (``backend/model/cpu_gemm_int.c``) against the float32 matmuls it replaces (``LLMTRACE_PREFILL_GEMM=
float32``, the path before), both in this run, their runs interleaved, at 1 and 2 threads.

Both engines are the host's no-bfloat16 path (bfloat16 activations and cache, the native attention, the fused
int4 decode); they differ only in the prefill matmuls. On a CPU with bfloat16 dot products the path is forced
(``LLMTRACE_CPU_PATH=nobf16``'s features) so the comparison is the same one.

Keys, per variant (``int16_`` / ``float32_``) and threads (``t1_`` / ``t2_``): ``ttft_cold_ms`` (a 1,000-token
prompt, nothing cached, to its first token, best of BENCH_PREFILL_REPEATS), ``ttft_cold_cpu_ms`` (this process's
CPU time for it, all threads), ``prefill_tok_s``; ``int16_over_float32`` the speed-ups; the load average before
and after each run (``loads``). Environment: BENCH_PREFILL_REPEATS (3), BENCH_RESULTS_DIR, BENCH_PREFILL_RESULT
(the results file's name, ``prefill_gemm``). Run: ``python benchmarks/prefill_gemm.py``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_s, save  # noqa: E402

REPEATS = int(os.environ.get("BENCH_PREFILL_REPEATS", "3"))
RESULT = os.environ.get("BENCH_PREFILL_RESULT", "prefill_gemm")
LONG_LEN = 1000


def _engines() -> dict[str, object]:
    from llmtrace.backend.engine import Engine, EngineConfig
    from llmtrace.backend.model import cpu_features
    from llmtrace.backend.model.compute_path import choose
    from llmtrace.backend.model.gguf_reader import GGUFModelFile
    from llmtrace.backend.model.llama import LlamaModel
    from llmtrace.backend.model.pull import default_model_path
    from llmtrace.backend.model.tokenizer import Tokenizer

    host = cpu_features.detect()
    gone = host.flags & {"avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}
    features = dataclasses.replace(host, flags=host.flags - gone, hidden=host.hidden | gone)
    compute = choose("cpu", "auto", features=features)
    if not compute.prefill_gemm:
        raise SystemExit(f"no integer prefill kernel on this CPU ({host.isa}): {compute.reason}")
    file = GGUFModelFile(default_model_path())
    tokenizer = Tokenizer.from_gguf(file.path, reader=file.reader)
    engines = {}
    for name, path in (("int16", compute), ("float32", dataclasses.replace(compute, prefill_gemm=""))):
        model = LlamaModel.from_gguf_path(file, path)
        engines[name] = Engine.from_model(model, tokenizer, EngineConfig(
            dtype="bfloat16", num_blocks=512, max_num_seqs=4, max_num_batched_tokens=2048, max_prefill_chunk=1024))
    return engines


def _cold(engine, ids: list[int]) -> tuple[float, float]:  # noqa: ANN001
    """(wall s, CPU s) of one prompt to its first token, nothing cached."""
    from llmtrace.backend.engine import EngineRequest
    from llmtrace.backend.generation.params import SamplingParams

    engine.add_request(EngineRequest(f"r{ids[0]}", ids, SamplingParams(temperature=0.0, max_tokens=1,
                                                                       ignore_eos=True)))
    t0, c0 = time.perf_counter(), cpu_s()
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - t0, cpu_s() - c0


def main() -> None:
    engines = _engines()
    tokenizer = next(iter(engines.values())).tokenizer  # type: ignore[attr-defined]
    text = " ".join(f"Record {i}: the shipment left the northern depot at dawn and arrived on time." for i in range(400))
    base = tokenizer.encode(text)[:LONG_LEN]
    out: dict[str, object] = {"threads_list": "1,2", "repeats": REPEATS}
    for name, engine in engines.items():
        out[f"{name}_compute_path"] = engine.compute_path_summary()  # type: ignore[attr-defined]
        _cold(engine, [2000, *base[1:64]])  # warm up: the kernels, the library, the allocator
    runs: dict[str, list[tuple[float, float]]] = {}
    loads = []
    variant = 3000
    for _ in range(REPEATS):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, engine in engines.items():  # interleaved: every repeat runs both back to back
                variant += 1
                before = os.getloadavg()[0]
                runs.setdefault(f"t{threads}_{name}", []).append(_cold(engine, [variant, *base[1:]]))
                loads.append(f"t{threads} {name}: {before:.1f}-{os.getloadavg()[0]:.1f}")
    for key, got in runs.items():
        threads, name = key.split("_", 1)
        wall, cpu = min(w for w, _ in got), min(c for _, c in got)
        out[f"{threads}_{name}_ttft_cold_ms"] = round(wall * 1e3, 1)
        out[f"{threads}_{name}_ttft_cold_cpu_ms"] = round(cpu * 1e3, 1)
        out[f"{threads}_{name}_prefill_tok_s"] = round(LONG_LEN / wall, 1)
        out[f"{threads}_{name}_all_ms"] = ", ".join(f"{w * 1e3:.0f}/{c * 1e3:.0f}" for w, c in got)
    for threads in ("t1", "t2"):
        for kind in ("ttft_cold_ms", "ttft_cold_cpu_ms"):
            out[f"{threads}_int16_over_float32_{kind}"] = round(
                out[f"{threads}_float32_{kind}"] / out[f"{threads}_int16_{kind}"], 2)  # type: ignore[operator]
    out["loads"] = "; ".join(loads)
    save(RESULT, out)


if __name__ == "__main__":
    main()
