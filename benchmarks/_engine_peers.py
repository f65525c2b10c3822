"""The llama.cpp peers of ``benchmarks/engine.py``: the prebuilt one and the one built for this host.

- ``NativePeer`` (``llamacpp_`` keys): llama.cpp's server through xllamacpp's prebuilt wheel (compiled for a
  baseline x86-64: its system info reports AVX2 and no AVX-512), one slot, timed by llama.cpp's own ``timings``.
- ``HostPeer`` (``llamacpp_host_`` keys): llama-cpp-python built from source on this machine with GGML_NATIVE
  (``_llamacpp_host.py``: cached once per CPU kind), in this process, timed by llama.cpp's own performance
  counters (``llama_perf_context``: prompt and generation time inside llama.cpp). The peer a user who builds
  llama.cpp gets, and the one the engine's targets are measured against.

Each records its own CPU features (llama.cpp's system info line, verbatim) and threads. Their batch-1 runs are
interleaved with the engine's (``b1`` after each of its own).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPT_LEN = 500
LONG_LEN = 1000


class NativePeer:
    """llama.cpp through xllamacpp's prebuilt server (one slot, our thread count), timed by llama.cpp itself:
    its ``timings`` (prompt and generation time inside the server) leave HTTP out of its numbers."""

    def __init__(self, threads: int, tokens: int, repeats: int, prompt) -> None:  # noqa: ANN001
        import xllamacpp
        from server import free_port, wait_up

        from llmtrace.backend.model.pull import default_model_path
        from llmtrace.backend.model.tokenizer import Tokenizer

        path = default_model_path()
        self.tk = Tokenizer.from_gguf(path)
        self.threads, self.tokens, self.repeats, self.prompt = threads, tokens, repeats, prompt
        self.system_info = str(xllamacpp.get_system_info()).strip()  # the library the server child loads
        self._dir = tempfile.TemporaryDirectory(prefix="llmtrace-bench-engine-")
        log = Path(self._dir.name) / "llamacpp.log"
        port = free_port()
        with log.open("wb") as fh:
            self.proc = subprocess.Popen([sys.executable, str(HERE / "_llamacpp_native.py"), str(path), str(port),
                                          "1", "4096", str(threads)],
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
        self.runs.append(self.gen(self.prompt(self.tk, PROMPT_LEN, variant), self.tokens))

    def results(self) -> dict[str, object]:
        colds = [self.gen(self.prompt(self.tk, LONG_LEN, 7 + i), 1) for i in range(self.repeats)]
        # a run whose own timings are not positive is discarded (seen under heavy load: a negative rate)
        prefill = [r["prompt_per_second"] for r in self.runs if r.get("prompt_per_second", 0) > 0]
        decode = [r["predicted_per_second"] for r in self.runs if r.get("predicted_per_second", 0) > 0]
        out: dict[str, object] = {
            "llamacpp_via": "xllamacpp (prebuilt wheel; llama.cpp's server, 1 slot; its own timings, no HTTP; "
                            "b1 runs interleaved with ours)",
            "llamacpp_system_info": self.system_info,
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


class HostPeer:
    """llama.cpp built here (llama-cpp-python from source, GGML_NATIVE) in this process, our thread count for
    its decode and batch threads, timed by llama.cpp's own counters (wall clock where they are missing)."""

    def __init__(self, threads: int, tokens: int, repeats: int, prompt) -> None:  # noqa: ANN001
        import _llamacpp_host

        from llmtrace.backend.model.pull import default_model_path
        from llmtrace.backend.model.tokenizer import Tokenizer

        t0 = time.perf_counter()
        self.site = _llamacpp_host.activate()  # builds it the first time on this CPU kind (minutes)
        self.ready_s = round(time.perf_counter() - t0, 1)
        import llama_cpp

        self.lc = llama_cpp
        self.system_info = _llamacpp_host.system_info()
        path = default_model_path()
        self.tk = Tokenizer.from_gguf(path)
        self.threads, self.tokens, self.repeats, self.prompt = threads, tokens, repeats, prompt
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                                   n_batch=512, verbose=False)
        self.runs: list[tuple[float, float]] = []  # (prefill tok/s, decode tok/s)
        self.cpu_log: list[tuple[float, float, int]] = []  # (prefill CPU s, decode CPU s, decoded tokens)
        self.b1_cpu: list[tuple[float, float, int]] = []
        self.timed_by = "wall"
        self.gen(prompt(self.tk, 64, 900), 4)  # warm up

    def _perf(self) -> tuple[float, int, float, int] | None:
        """llama.cpp's own (prompt ms, prompt tokens, generation ms, generated tokens) since the last reset."""
        ctx = getattr(getattr(self.llm, "_ctx", None), "ctx", None)
        fn = getattr(self.lc, "llama_perf_context", None)
        if ctx is None or fn is None:
            return None
        d = fn(ctx)
        return float(d.t_p_eval_ms), int(d.n_p_eval), float(d.t_eval_ms), int(d.n_eval)

    def gen(self, ids: list[int], n: int) -> tuple[float, float, float]:
        """(prompt ms, prefill tok/s, decode tok/s) of one greedy run of ``n`` tokens, nothing cached."""
        from common import cpu_s

        self.llm.reset()
        reset = getattr(self.lc, "llama_perf_context_reset", None)
        ctx = getattr(getattr(self.llm, "_ctx", None), "ctx", None)
        if reset is not None and ctx is not None:
            reset(ctx)
        t0, c0 = time.perf_counter(), cpu_s()
        first, c_first = 0.0, c0
        for i, _ in enumerate(self.llm.generate(ids, temp=0.0, reset=True)):
            if i == 0:
                first, c_first = time.perf_counter(), cpu_s()
            if i + 1 >= n:
                break
        end = time.perf_counter()
        self.cpu_log.append((c_first - c0, cpu_s() - c_first, n - 1))  # this process's CPU seconds, by phase
        perf = self._perf()
        if perf is not None and perf[1] >= len(ids) and perf[0] > 0:  # the whole prompt counted by llama.cpp
            self.timed_by = "llama_perf_context (llama.cpp's own prompt and generation time)"
            p_ms, p_n, e_ms, e_n = perf
            return p_ms, p_n / p_ms * 1e3, (e_n / e_ms * 1e3 if e_n and e_ms > 0 else 0.0)
        return (first - t0) * 1e3, len(ids) / (first - t0), (n - 1) / (end - first) if n > 1 and end > first else 0.0

    def b1(self, variant: int) -> None:
        _, prefill, decode = self.gen(self.prompt(self.tk, PROMPT_LEN, variant), self.tokens)
        self.runs.append((prefill, decode))
        self.b1_cpu.append(self.cpu_log[-1])

    def results(self) -> dict[str, object]:
        cold = min(self.gen(self.prompt(self.tk, LONG_LEN, 7 + i), 1)[0] for i in range(self.repeats))
        cold_cpu = min(c[0] for c in self.cpu_log[-self.repeats:])
        return {
            "llamacpp_host_via": f"llama-cpp-python {self.lc.__version__} built here from source (GGML_NATIVE=on, "
                                 f"cached in {self.site}); in process; timed by {self.timed_by}; b1 runs "
                                 "interleaved with ours",
            "llamacpp_host_system_info": self.system_info,
            "llamacpp_host_threads": self.threads,
            "llamacpp_host_ready_s": self.ready_s,  # the build's time on its first run, else the import's
            "llamacpp_host_prefill_tok_s": round(max(r[0] for r in self.runs), 1),
            "llamacpp_host_decode_tok_s_b1": round(max(r[1] for r in self.runs), 2),
            "llamacpp_host_ttft_cold_ms": round(cold, 1),
            # per CPU second of this process, as the engine's *_cpu keys (the same process, runs not overlapping)
            "llamacpp_host_prefill_tok_per_cpu_s": round(PROMPT_LEN / min(c[0] for c in self.b1_cpu), 1),
            "llamacpp_host_decode_tok_per_cpu_s_b1": round(max(c[2] / c[1] for c in self.b1_cpu if c[1] > 0), 2),
            "llamacpp_host_ttft_cold_cpu_ms": round(cold_cpu * 1e3, 1),
        }

    def close(self) -> None:
        self.llm.close()
