"""Benchmark `engine`: the bundled engine against its peers on the same model and the same prompts.

Keys (ours, then the same prefixed ``hf_`` and ``llamacpp_`` for the peers):
- decode_tok_s_b1: greedy decode speed of one stream (500-token prompt, BENCH_ENGINE_TOKENS new tokens).
- decode_tok_s_b8_aggregate / decode_tok_s_b16_aggregate: tokens per second summed over 8 / 16 streams
  decoding together (distinct 500-token prompts), measured once every stream has its first token.
- prefill_tok_s: 500 prompt tokens over the time to the first token, one stream, nothing cached.
- decode_tok_s_b1_untimed: batch 1 with ``stage_timing`` off (the forward clock reads no clock), its runs
  interleaved with decode_tok_s_b1's on the same engine; stage_timing_overhead = 1 - timed / untimed.
- ttft_cold_ms / ttft_cached90_ms: a 1,000-token prompt cold, then a prompt sharing its first 900 tokens
  (the engine's prefix cache serves them; transformers has no cross-request cache, so it prefills again).

Peers: HF transformers ``generate`` on the GGUF (dequantized by transformers, bfloat16); llama.cpp through
xllamacpp's prebuilt llama.cpp server with one slot, timed by llama.cpp's own ``timings`` (``llamacpp_`` keys,
the peer the targets are measured against); and llama.cpp through llama-cpp-python's ``Llama`` in this process,
timed around its ``generate`` (``llamacpp_python_`` keys, the second peer). Each llama.cpp peer's batch-1 runs
are interleaved with ours; one that is not installed is skipped with a note.

The JSON records which CPU produced it: the flags the engine's choices read (``cpu_flags``: avx2, avx512f,
avx512_bf16, avx512_vnni, amx...), what ``LLMTRACE_CPU_PATH`` hid (``cpu_flags_hidden``, ``cpu_path_forced``),
torch's own ISA report (``torch_cpu_capability``), the threads, and the compute path the engine chose per phase
(``compute_path``, as ``serve``'s ready line says it). ``LLMTRACE_CPU_PATH=nobf16`` measures the no-bfloat16
path on a CPU that has bfloat16.

Environment: BENCH_ENGINE_DTYPE (auto: the engine's choice for this CPU), BENCH_ENGINE_TOKENS (128), BENCH_ENGINE_REPEATS (2, best
run kept), BENCH_ENGINE_THREADS (torch's default; on an oversubscribed machine one thread is faster; the
recorded runs use 1, for every peer alike), BENCH_ENGINE_PEERS ("hf,llamacpp"; "llamacpp" runs both llama.cpp
peers), BENCH_RESULTS_DIR (write the JSON elsewhere: a quick check must not replace the recorded results),
BENCH_ENGINE_BATCHES ("8,16": the aggregate batches; "" skips them), BENCH_ENGINE_RESULT (the results file's name, ``engine``: e.g. ``engine_avx2`` for another CPU kind's row).
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

from common import save  # noqa: E402

DTYPE = os.environ.get("BENCH_ENGINE_DTYPE", "auto")
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


def bench_engine(peers: list[NativePeer | PythonPeer] | None = None) -> dict[str, float]:
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.generation.params import SamplingParams

    engine = Engine(None, EngineConfig(dtype=DTYPE, num_blocks=2048, max_num_seqs=16, max_num_batched_tokens=2048,
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
        t0 = time.perf_counter()
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
                first_done = now
                decoded = 0
        end = time.perf_counter()
        assert first_done is not None
        return first_done - t0, decoded / (end - first_done) if end > first_done else 0.0

    run([prompt(tk, 64, 900)], 4)  # warm up
    variant = iter(range(10_000, 20_000))  # every run gets fresh prompts: nothing cached unless meant to be
    out: dict[str, float] = {}
    # batch 1 with the forward clock on (the default) and off, interleaved: the cost of stage timing
    timed, untimed = [], []
    for _ in range(REPEATS):
        timed.append(run([prompt(tk, PROMPT_LEN, next(variant))], TOKENS))
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
    colds, cacheds = [], []
    for _ in range(REPEATS):
        long = prompt(tk, LONG_LEN, next(variant))
        colds.append(run([long], 1)[0])
        warm = long[:900] + prompt(tk, 100, 8)[1:] + [next(variant)]
        cacheds.append(run([warm], 1)[0])
    cold, cached = min(colds), min(cacheds)
    out["ttft_cold_ms"] = round(cold * 1e3, 1)
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


class NativePeer:
    """llama.cpp through xllamacpp's prebuilt server (one slot, our thread count), timed by llama.cpp itself:
    its ``timings`` (prompt and generation time inside the server) leave HTTP out of its numbers. Its batch-1
    runs are interleaved with ours (``bench_engine`` calls ``b1`` after each of its own)."""

    def __init__(self) -> None:
        import subprocess
        import tempfile

        from server import free_port, wait_up

        from llmtrace.backend.model.pull import default_model_path
        from llmtrace.backend.model.tokenizer import Tokenizer

        path = default_model_path()
        self.tk = Tokenizer.from_gguf(path)
        self.threads = THREADS or torch.get_num_threads()
        self._dir = tempfile.TemporaryDirectory(prefix="llmtrace-bench-engine-")
        log = Path(self._dir.name) / "llamacpp.log"
        port = free_port()
        with log.open("wb") as fh:
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "_llamacpp_native.py"),
                                          str(path), str(port), "1", "4096", str(self.threads)],
                                         stdin=subprocess.PIPE, stdout=fh, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        wait_up(self.proc, self.base, log, path="/health")
        self.runs: list[dict[str, float]] = []
        self.gen(prompt(self.tk, 64, 900), 4)  # warm up

    def gen(self, ids: list[int], n: int) -> dict[str, float]:
        import httpx

        body = {"prompt": ids, "n_predict": n, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
        return httpx.post(f"{self.base}/completion", json=body, timeout=600).json()["timings"]

    def b1(self, variant: int) -> None:
        self.runs.append(self.gen(prompt(self.tk, PROMPT_LEN, variant), TOKENS))

    def results(self) -> dict[str, object]:
        colds = [self.gen(prompt(self.tk, LONG_LEN, 7 + i), 1) for i in range(REPEATS)]
        # a run whose own timings are not positive is discarded (seen under heavy load: a negative rate)
        prefill = [r["prompt_per_second"] for r in self.runs if r.get("prompt_per_second", 0) > 0]
        decode = [r["predicted_per_second"] for r in self.runs if r.get("predicted_per_second", 0) > 0]
        out: dict[str, object] = {
            "llamacpp_via": "xllamacpp (llama.cpp's server, 1 slot; its own timings, no HTTP; b1 runs interleaved with ours)",
            "llamacpp_threads": self.threads,
            "llamacpp_ttft_cold_ms": round(min(r["prompt_ms"] for r in colds), 1),
        }
        if len(decode) < len(self.runs):
            out["llamacpp_runs_discarded"] = len(self.runs) - len(decode)
        if prefill:
            out["llamacpp_prefill_tok_s"] = round(max(prefill), 1)
        if decode:
            out["llamacpp_decode_tok_s_b1"] = round(max(decode), 2)
        return out

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self._dir.cleanup()


class PythonPeer:
    """llama.cpp through llama-cpp-python's ``Llama`` in this process (our thread count for both its decode and
    its batch threads), timed around ``generate``: the first token's wait is the prefill, the rest decode. Its
    batch-1 runs are interleaved with ours like the native peer's."""

    def __init__(self) -> None:
        from llama_cpp import Llama

        from llmtrace.backend.model.pull import default_model_path
        from llmtrace.backend.model.tokenizer import Tokenizer

        path = default_model_path()
        self.tk = Tokenizer.from_gguf(path)
        self.threads = THREADS or torch.get_num_threads()
        self.llm = Llama(model_path=str(path), n_ctx=2048, n_threads=self.threads, n_threads_batch=self.threads,
                         verbose=False)
        self.runs: list[tuple[float, float]] = []  # (seconds to the first token, decode tokens/s)
        self.gen(prompt(self.tk, 64, 900), 4)  # warm up

    def gen(self, ids: list[int], n: int) -> tuple[float, float]:
        self.llm.reset()
        t0 = time.perf_counter()
        first = 0.0
        for i, _ in enumerate(self.llm.generate(ids, temp=0.0, reset=True)):
            if i == 0:
                first = time.perf_counter()
            if i + 1 >= n:
                break
        end = time.perf_counter()
        return first - t0, (n - 1) / (end - first) if n > 1 and end > first else 0.0

    def b1(self, variant: int) -> None:
        self.runs.append(self.gen(prompt(self.tk, PROMPT_LEN, variant), TOKENS))

    def results(self) -> dict[str, object]:
        import llama_cpp

        cold = min(self.gen(prompt(self.tk, LONG_LEN, 7 + i), 1)[0] for i in range(REPEATS))
        return {
            "llamacpp_python_via": f"llama-cpp-python {llama_cpp.__version__} (in process, wall clock around generate; "
                                   "b1 runs interleaved with ours)",
            "llamacpp_python_prefill_tok_s": round(PROMPT_LEN / min(r[0] for r in self.runs), 1),
            "llamacpp_python_decode_tok_s_b1": round(max(r[1] for r in self.runs), 2),
            "llamacpp_python_ttft_cold_ms": round(cold * 1e3, 1),
        }

    def close(self) -> None:
        self.llm.close()


def main() -> None:
    from llmtrace.backend.model.cpu_features import detect

    if THREADS:
        torch.set_num_threads(THREADS)
    results: dict[str, object] = {
        "dtype": DTYPE,
        "new_tokens": TOKENS,
        "threads": torch.get_num_threads(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
        **detect().as_dict(),  # the CPU that produced these numbers (and what LLMTRACE_CPU_PATH hid)
    }
    peers: list[NativePeer | PythonPeer] = []
    skipped: dict[str, str] = {}
    try:
        if "llamacpp" in PEERS:  # started before ours runs so the runs interleave
            for key, module, cls, hint in (
                ("llamacpp", "xllamacpp", NativePeer, "pip install xllamacpp"),
                ("llamacpp_python", "llama_cpp", PythonPeer, "pip install llama-cpp-python"),
            ):
                if importlib.util.find_spec(module) is None:
                    skipped[f"{key}_skipped"] = f"{module} is not installed ({hint}, or pip install -e '.[bench]')"
                else:
                    peers.append(cls())
        results.update(bench_engine(peers))
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
    hf_b1 = results.get("hf_decode_tok_s_b1")
    if isinstance(hf_b1, float) and hf_b1 > 0:
        results["decode_b1_over_hf"] = round(results["decode_tok_s_b1"] / hf_b1, 2)  # type: ignore[operator]
    hf_pf = results.get("hf_prefill_tok_s")
    if isinstance(hf_pf, float) and hf_pf > 0:
        results["prefill_over_hf"] = round(results["prefill_tok_s"] / hf_pf, 2)  # type: ignore[operator]
    lc_b1 = results.get("llamacpp_decode_tok_s_b1")
    if isinstance(lc_b1, float) and lc_b1 > 0:  # targets (issue 22): >= 1.0, >= 3, >= 4
        results["decode_b1_over_llamacpp"] = round(results["decode_tok_s_b1"] / lc_b1, 2)  # type: ignore[operator]
        if "decode_tok_s_b16_aggregate" in results:
            results["decode_b16_aggregate_over_llamacpp_b1"] = round(
                results["decode_tok_s_b16_aggregate"] / lc_b1, 2)  # type: ignore[operator]
    lc_pf = results.get("llamacpp_prefill_tok_s")
    if isinstance(lc_pf, float) and lc_pf > 0:
        results["prefill_over_llamacpp"] = round(results["prefill_tok_s"] / lc_pf, 2)  # type: ignore[operator]
    for key, ratio in (("decode_tok_s_b1", "decode_b1"), ("prefill_tok_s", "prefill")):  # the second peer (no target)
        theirs = results.get(f"llamacpp_python_{key}")
        if isinstance(theirs, float) and theirs > 0:
            results[f"{ratio}_over_llamacpp_python"] = round(results[key] / theirs, 2)  # type: ignore[operator]
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    if max(results["load_average_at_start"], results["load_average_at_end"]) > (os.cpu_count() or 1):  # type: ignore[call-overload]
        results["note"] = "measured under load: other processes shared the CPUs (see the load averages)"
    save(RESULT, results)


if __name__ == "__main__":
    main()
