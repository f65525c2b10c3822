"""Benchmark `engine_thread`: why `llmtrace serve` steps its engine on the main thread.

The same engine (default model, bfloat16, torch's default thread count), batches of 1 and 16 decoding 64
tokens, stepped from three places, each in a fresh process because the effect depends on which threads
have run torch ops before:

- main: the model is loaded and stepped on the main thread (what `llmtrace serve` does)
- second_thread: loaded on the main thread, stepped on another one (an engine thread beside a server loop;
  what `AsyncEngine(engine)` does by default)
- thread_only: loaded and stepped on one non-main thread, the main thread never touching torch

Keys: decode_tok_s_b{1,16}_{placement}, and second_thread_over_main_b{1,16} (< 1 means slower). torch's OpenMP
runtime (libgomp) cuts its workers' spinning once a process has more OpenMP threads than cores, which a
second thread running torch ops brings about on a 2-core machine.

    python benchmarks/engine_thread.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

PLACEMENTS = ("main", "second_thread", "thread_only")
TOKENS = 64
REPS = 3


def measure() -> dict[str, float]:
    """Decode tokens/s at batch 1 and 16 (best of REPS), on the calling thread."""
    from llmtrace.backend.engine import Engine, EngineConfig, EngineRequest
    from llmtrace.backend.generation.params import SamplingParams

    engine = Engine(None, EngineConfig(dtype="bfloat16"))
    return run_batches(engine, EngineRequest, SamplingParams)


def run_batches(engine, request_cls, params_cls) -> dict[str, float]:  # type: ignore[no-untyped-def]
    tk = engine.tokenizer
    params = params_cls(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    ids = iter(range(10**9))

    def batch(n: int) -> float:
        for _ in range(n):
            i = next(ids)
            prompt = tk.encode(tk.apply_chat_template([{"role": "user", "content": f"Ticket {i}: what now?"}]),
                               add_special_tokens=True)
            engine.add_request(request_cls(f"r{i}", prompt, params))
        t0 = time.perf_counter()
        tokens = 0
        while engine.has_unfinished():
            tokens += sum(len(o.new_token_ids) for o in engine.step())
        return tokens / (time.perf_counter() - t0)

    batch(1)  # warm-up
    return {f"b{n}": round(max(batch(n) for _ in range(REPS)), 1) for n in (1, 16)}


def child(placement: str) -> None:
    out: dict[str, float] = {}
    if placement == "main":
        out = measure()
    else:
        engine_box: list = []
        if placement == "second_thread":
            from llmtrace.backend.engine import Engine, EngineConfig

            engine_box.append(Engine(None, EngineConfig(dtype="bfloat16")))

        def body() -> None:
            if engine_box:
                from llmtrace.backend.engine import EngineRequest
                from llmtrace.backend.generation.params import SamplingParams

                out.update(run_batches(engine_box[0], EngineRequest, SamplingParams))
            else:
                out.update(measure())

        t = threading.Thread(target=body)
        t.start()
        t.join()
    print(json.dumps(out))


def main() -> None:
    results: dict[str, object] = {"tokens": TOKENS, "dtype": "bfloat16"}
    for placement in PLACEMENTS:
        proc = subprocess.run([sys.executable, __file__, "--child", placement], capture_output=True, text=True,
                              check=True)
        numbers = json.loads(proc.stdout.strip().splitlines()[-1])
        for batch, tok_s in numbers.items():
            results[f"decode_tok_s_{batch}_{placement}"] = tok_s
        print(placement, numbers, flush=True)
    for batch in ("b1", "b16"):
        results[f"second_thread_over_main_{batch}"] = round(
            float(results[f"decode_tok_s_{batch}_second_thread"]) / float(results[f"decode_tok_s_{batch}_main"]), 3)  # type: ignore[arg-type]
    import torch

    results["threads"] = torch.get_num_threads()
    save("engine_thread", results)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
