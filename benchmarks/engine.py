"""Benchmark `engine`: the bundled engine against its peers on the same model and the same prompts.

Keys (ours, then the same prefixed ``hf_``, ``llamacpp_`` and ``llamacpp_host_`` for the peers):
- decode_tok_s_b1: greedy decode speed of one stream (500-token prompt, BENCH_ENGINE_TOKENS new tokens).
- decode_tok_s_b8_aggregate / decode_tok_s_b16_aggregate: tokens per second summed over 8 / 16 streams
  decoding together (distinct 500-token prompts), measured once every stream has its first token.
- prefill_tok_s: 500 prompt tokens over the time to the first token, one stream, nothing cached.
- decode_tok_s_b1_untimed: batch 1 with ``stage_timing`` off (the forward clock reads no clock), its runs
  interleaved with decode_tok_s_b1's on the same engine; stage_timing_overhead = 1 - timed / untimed.
- ttft_cold_ms / ttft_cached90_ms: a 1,000-token prompt cold, then a prompt sharing its first 900 tokens
  (the engine's prefix cache serves them; transformers has no cross-request cache, so it prefills again).
- prefill_tok_per_cpu_s / decode_tok_per_cpu_s_b1 / ttft_cold_cpu_ms: the same runs per CPU second of this
  process (the host-built peer's likewise: it runs in this process, never at the same time): on a machine
  shared with other work the wall figures fall with the share of the cores a side got, these far less (at 1
  thread; at 2, OpenMP workers waiting for a core spin and count too).

Peers (``_engine_peers.py``): HF transformers ``generate`` on the GGUF (dequantized by transformers, bfloat16);
llama.cpp through xllamacpp's prebuilt server with one slot, timed by llama.cpp's own ``timings`` (``llamacpp_``
keys); and llama.cpp as its users build it: llama-cpp-python compiled here from source with GGML_NATIVE
(``_llamacpp_host.py``, cached once per CPU kind under ~/.cache/llmtrace/llamacpp-<key>; the first run builds
it, minutes of every core), in this process, timed by llama.cpp's own counters (``llamacpp_host_`` keys: the
peer the targets are measured against, ``targets_vs_llamacpp_host``). Each llama.cpp peer records llama.cpp's
system info line verbatim (``*_system_info``: the CPU features its build uses) and its threads; its batch-1
runs are interleaved with ours; one that cannot run is skipped with a note.

The JSON records which CPU produced it: the flags the engine's choices read (``cpu_flags``: avx2, avx512f,
avx512_bf16, avx512_vnni, amx...), what ``LLMTRACE_CPU_PATH`` hid (``cpu_flags_hidden``, ``cpu_path_forced``),
torch's own ISA report (``torch_cpu_capability``), the threads, and the compute path the engine chose per phase
(``compute_path``, as ``serve``'s ready line says it). ``LLMTRACE_CPU_PATH=nobf16`` measures the no-bfloat16
path on a CPU that has bfloat16.

Environment: BENCH_ENGINE_DTYPE (auto: the engine's choice for this CPU; a list such as "auto,float32,bfloat16"
runs each variant in turn in this run, each interleaved with the peers, the first one's keys unprefixed, the
others' prefixed ``float32_``/``bfloat16_``), BENCH_ENGINE_TOKENS (128), BENCH_ENGINE_REPEATS (2, best
run kept), BENCH_ENGINE_THREADS (torch's default; on an oversubscribed machine one thread is faster),
BENCH_ENGINE_PEERS ("hf,llamacpp"; "llamacpp" runs both llama.cpp peers, "llamacpp_host" the host-built one
alone), BENCH_LLAMACPP_HOST (build: build it when missing; cached: never build; 0: skip it),
BENCH_RESULTS_DIR (write the JSON elsewhere: a quick check must not replace the recorded results),
BENCH_ENGINE_BATCHES ("8,16": the aggregate batches; "" skips them), BENCH_ENGINE_RESULT (the results file's
name, ``engine``: e.g. ``engine_avx2`` or ``engine_xeon_nobf16`` for another CPU kind's row).
Run: ``python benchmarks/engine.py`` (or ``make bench ONLY=engine``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _engine_peers import HostPeer, NativePeer  # noqa: E402

from common import cpu_s, save  # noqa: E402

# the engine's variants, one after another in this run: "auto" (the path chosen for this CPU), "float32",
# "bfloat16" (overrides); the first one's keys are unprefixed, the others' prefixed with their name
DTYPES = [d.strip() for d in os.environ.get("BENCH_ENGINE_DTYPE", "auto").split(",") if d.strip()]
TOKENS = int(os.environ.get("BENCH_ENGINE_TOKENS", "128"))
THREADS = int(os.environ.get("BENCH_ENGINE_THREADS", "0"))
PEERS = os.environ.get("BENCH_ENGINE_PEERS", "hf,llamacpp").split(",")
REPEATS = int(os.environ.get("BENCH_ENGINE_REPEATS", "2"))
BATCHES = [int(b) for b in os.environ.get("BENCH_ENGINE_BATCHES", "8,16").split(",") if b.strip()]
RESULT = os.environ.get("BENCH_ENGINE_RESULT", "engine")  # results/<name>.json: one file per CPU kind or path
PROMPT_LEN = 500
LONG_LEN = 1000


def best(measure) -> tuple[float, float]:  # noqa: ANN001
    """Run a (seconds-to-first-token, tokens/s) measurement REPEATS times; keep the best of each. Other
    processes on a shared machine only ever make a run slower."""
    runs = [measure() for _ in range(REPEATS)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def base_tokens(tokenizer, n: int) -> list[int]:  # noqa: ANN001
    text = " ".join(f"Record {i}: the shipment left the northern depot at dawn and arrived on time." for i in range(400))
    ids = tokenizer.encode(text)
    if len(ids) < n:
        raise RuntimeError("benchmark text too short")
    return ids[:n]


def prompt(tokenizer, n: int, variant: int) -> list[int]:  # noqa: ANN001
    """Distinct prompts of the same length: the variant changes the first token (no shared prefix)."""
    ids = base_tokens(tokenizer, n)
    return [1000 + variant, *ids[1:]]


# ---------------------------------------------------------------------------------------------------- ours


def bench_engine(peers: list[NativePeer | HostPeer] | None = None, dtype: str = "auto") -> dict[str, float]:
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.generation.params import SamplingParams

    # float32 by name would be the dense reference; the variants all keep the int4 decode
    engine = Engine(None, EngineConfig(dtype=dtype, decode="int4" if dtype == "float32" else "auto", num_blocks=2048, max_num_seqs=16, max_num_batched_tokens=2048,
                                       max_prefill_chunk=1024))
    tk = engine.tokenizer
    counter = [0]
    sections: dict[str, float] = {}  # forward sections summed over batch-1 decode steps (the engine's own clock)
    section_steps = [0]

    def params(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

    def run(prompts: list[list[int]], n: int) -> tuple[float, float]:
        """(seconds to the last stream's first token, decode tokens/s after that)."""
        for p in prompts:
            counter[0] += 1
            engine.add_request(EngineRequest(f"b{counter[0]}", p, params(n)))
        t0, c0 = time.perf_counter(), cpu_s()
        c_first = c0
        have_first: set[str] = set()
        first_done = None
        decoded = 0
        while engine.has_unfinished():
            outs = engine.step()
            now = time.perf_counter()
            for o in outs:
                if o.request_id in have_first:
                    decoded += len(o.new_token_ids)
                else:
                    have_first.add(o.request_id)
                    decoded += len(o.new_token_ids) - 1
            if first_done is not None and len(prompts) == 1 and engine.last_step.sections_ms:  # timed runs only
                for name, ms in engine.last_step.sections_ms.items():
                    sections[name] = sections.get(name, 0.0) + ms
                section_steps[0] += 1
            if first_done is None and len(have_first) == len(prompts):
                first_done, c_first = now, cpu_s()
                decoded = 0
        end = time.perf_counter()
        assert first_done is not None
        cpu_log.append((c_first - c0, cpu_s() - c_first, decoded))  # this process's CPU seconds, by phase
        return first_done - t0, decoded / (end - first_done) if end > first_done else 0.0

    cpu_log: list[tuple[float, float, int]] = []  # (prefill CPU s, decode CPU s, decoded tokens) of each run
    run([prompt(tk, 64, 900)], 4)  # warm up
    variant = iter(range(10_000, 20_000))  # every run gets fresh prompts: nothing cached unless meant to be
    out: dict[str, float] = {}
    # batch 1 with the forward clock on (the default) and off, interleaved: the cost of stage timing
    timed, untimed = [], []
    b1_cpu: list[tuple[float, float, int]] = []
    for _ in range(REPEATS):
        timed.append(run([prompt(tk, PROMPT_LEN, next(variant))], TOKENS))
        b1_cpu.append(cpu_log[-1])
        for peer in peers or []:
            peer.b1(next(variant))
        engine.runner.stage_timing = False
        try:
            untimed.append(run([prompt(tk, PROMPT_LEN, next(variant))], TOKENS))
        finally:
            engine.runner.stage_timing = True
    ttft, dec = min(r[0] for r in timed), max(r[1] for r in timed)
    out["prefill_tok_s"] = round(PROMPT_LEN / ttft, 1)
    out["decode_tok_s_b1"] = round(dec, 2)
    # the same runs per CPU second of this process (its threads' time, spinning included): under load from
    # other processes the wall figures above fall with the share of the cores this process got, these less so
    out["prefill_tok_per_cpu_s"] = round(PROMPT_LEN / min(c[0] for c in b1_cpu), 1)
    out["decode_tok_per_cpu_s_b1"] = round(max(c[2] / c[1] for c in b1_cpu if c[1] > 0), 2)
    # where a batch-1 decode step goes: per-section milliseconds per token (attention covers the layer's norm,
    # QKV, rotary, cache write, attention and output projection; feed_forward its norm and MLP)
    for name, total in sections.items():
        out[f"decode_b1_ms_per_token_{name}"] = round(total / max(section_steps[0], 1), 3)
    dec_untimed = max(r[1] for r in untimed)
    out["decode_tok_s_b1_untimed"] = round(dec_untimed, 2)
    out["stage_timing_overhead"] = round(1 - dec / dec_untimed, 3) if dec_untimed else 0.0  # share slower when on
    for batch in BATCHES:
        _, dec = best(lambda b=batch: run([prompt(tk, PROMPT_LEN, next(variant)) for _ in range(b)], TOKENS))
        out[f"decode_tok_s_b{batch}_aggregate"] = round(dec, 2)
    colds, cacheds, cold_cpu = [], [], []
    for _ in range(REPEATS):
        long = prompt(tk, LONG_LEN, next(variant))
        colds.append(run([long], 1)[0])
        cold_cpu.append(cpu_log[-1][0])
        warm = long[:900] + prompt(tk, 100, 8)[1:] + [next(variant)]
        cacheds.append(run([warm], 1)[0])
    cold, cached = min(colds), min(cacheds)
    out["ttft_cold_ms"] = round(cold * 1e3, 1)
    out["ttft_cold_cpu_ms"] = round(min(cold_cpu) * 1e3, 1)
    out["ttft_cached90_ms"] = round(cached * 1e3, 1)
    out["ttft_cached90_over_cold"] = round(cached / cold, 3)
    out["attention_backend"] = engine.attention.name  # type: ignore[assignment]
    out["compute_path"] = engine.compute_path_summary()  # type: ignore[assignment]
    out["engine_dtype"] = engine.config.dtype  # type: ignore[assignment]
    return out


# ---------------------------------------------------------------------------------------------------- peers


def bench_hf() -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    from llmtrace.backend.model.pull import default_model_path
    from llmtrace.backend.model.tokenizer import Tokenizer

    path = default_model_path()
    tk = Tokenizer.from_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.bfloat16)
    model.eval()

    from transformers import LogitsProcessor, LogitsProcessorList

    class Clock(LogitsProcessor):
        """Notes when each step's scores arrive: the first after prefill, then one per decoded token."""

        def __init__(self) -> None:
            self.times: list[float] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            self.times.append(time.perf_counter())
            return scores

    def gen(prompts: list[list[int]], n: int) -> tuple[float, float]:
        """(seconds to the first token, decode tokens/s summed over the batch after it)."""
        ids = torch.tensor(prompts)
        clock = Clock()
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=2, logits_processor=LogitsProcessorList([clock]))
        end = time.perf_counter()
        first = clock.times[0] - t0
        rate = len(prompts) * (n - 1) / (end - clock.times[0]) if n > 1 else 0.0
        return first, rate

    gen([prompt(tk, 64, 900)], 4)
    out: dict[str, float] = {}
    first, rate = best(lambda: gen([prompt(tk, PROMPT_LEN, 1)], TOKENS))
    out["hf_prefill_tok_s"] = round(PROMPT_LEN / first, 1)
    out["hf_decode_tok_s_b1"] = round(rate, 2)
    for batch in (8, 16):
        _, rate = best(lambda b=batch: gen([prompt(tk, PROMPT_LEN, 100 + b + i) for i in range(b)], TOKENS))
        out[f"hf_decode_tok_s_b{batch}_aggregate"] = round(rate, 2)
    long = prompt(tk, LONG_LEN, 7)
    out["hf_ttft_cold_ms"] = round(best(lambda: gen([long], 1))[0] * 1e3, 1)
    warm = long[:900] + prompt(tk, 100, 8)[1:] + [1234]
    out["hf_ttft_cached90_ms"] = round(best(lambda: gen([warm], 1))[0] * 1e3, 1)  # no cross-request cache
    return out


def ratios(results: dict[str, object], prefix: str = "") -> None:
    """Our figures over each peer's (``prefix``: a variant's keys), in place. Targets (issue 36, against the
    host-built llama.cpp): prefill >= 3, decode b1 >= 1.0, b16 aggregate >= 4x its b1, TTFT cold <= 1 s."""

    def num(key: str) -> float | None:
        value = results.get(key)
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    for peer in ("hf", "llamacpp", "llamacpp_host"):
        for ours, name in (("decode_tok_s_b1", "decode_b1"), ("prefill_tok_s", "prefill"),
                           ("decode_tok_per_cpu_s_b1", "decode_b1_per_cpu_s"),
                           ("prefill_tok_per_cpu_s", "prefill_per_cpu_s")):
            a, b = num(prefix + ours), num(f"{peer}_{ours}")
            if a and b:
                results[f"{prefix}{name}_over_{peer}"] = round(a / b, 2)
        b16, b1 = num(prefix + "decode_tok_s_b16_aggregate"), num(f"{peer}_decode_tok_s_b1")
        if peer != "hf" and b16 and b1:
            results[f"{prefix}decode_b16_aggregate_over_{peer}_b1"] = round(b16 / b1, 2)
    cold = num(prefix + "ttft_cold_ms")
    host = {k: num(f"{prefix}{k}_over_llamacpp_host") for k in ("prefill", "decode_b1", "decode_b16_aggregate")}
    if host["prefill"] is not None:
        results[f"{prefix}targets_vs_llamacpp_host"] = {
            "prefill_ge_3x": host["prefill"] >= 3.0,
            "decode_b1_ge_1x": (host["decode_b1"] or 0) >= 1.0,
            "b16_aggregate_ge_4x_its_b1": (num(f"{prefix}decode_b16_aggregate_over_llamacpp_host_b1") or 0) >= 4.0,
            "ttft_cold_1000_le_1s": cold is not None and cold <= 1000.0,
        }


def start_peers(skipped: dict[str, str]) -> list[NativePeer | HostPeer]:
    """The llama.cpp peers asked for (started before ours runs so the runs interleave); a missing one is noted."""
    peers: list[NativePeer | HostPeer] = []
    threads = THREADS or torch.get_num_threads()
    if "llamacpp" in PEERS:
        if importlib.util.find_spec("xllamacpp") is None:
            skipped["llamacpp_skipped"] = "xllamacpp is not installed (pip install -e '.[bench]')"
        else:
            peers.append(NativePeer(threads, TOKENS, REPEATS, prompt))
    if "llamacpp_host" in PEERS or "llamacpp" in PEERS:
        try:
            peers.append(HostPeer(threads, TOKENS, REPEATS, prompt))
        except Exception as exc:  # no compiler, no network for the source, BENCH_LLAMACPP_HOST=0/cached
            skipped["llamacpp_host_skipped"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    return peers


def main() -> None:
    from llmtrace.backend.model.cpu_features import detect

    if THREADS:
        torch.set_num_threads(THREADS)
    results: dict[str, object] = {
        "dtype": DTYPES[0],
        "variants": ",".join(DTYPES),
        "new_tokens": TOKENS,
        "threads": torch.get_num_threads(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
        **detect().as_dict(),  # the CPU that produced these numbers (and what LLMTRACE_CPU_PATH hid)
    }
    skipped: dict[str, str] = {}
    peers = start_peers(skipped)
    try:
        for i, dtype in enumerate(DTYPES):  # the first unprefixed; each variant's b1 runs interleaved with the peers'
            prefix = "" if i == 0 else f"{dtype}_"
            results.update({prefix + k: v for k, v in bench_engine(peers, dtype).items()})
        for peer in peers:
            results.update(peer.results())
        results.update(skipped)
    finally:
        for peer in peers:
            peer.close()
    if "hf" in PEERS:
        try:
            results.update(bench_hf())
        except Exception as exc:  # a peer that cannot run is reported, not fatal
            results["hf_skipped"] = f"{type(exc).__name__}: {exc}"
    for i, dtype in enumerate(DTYPES):
        ratios(results, "" if i == 0 else f"{dtype}_")
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    if max(results["load_average_at_start"], results["load_average_at_end"]) > (os.cpu_count() or 1):  # type: ignore[call-overload]
        results["note"] = "measured under load: other processes shared the CPUs (see the load averages)"
    save(RESULT, results)


if __name__ == "__main__":
    main()
