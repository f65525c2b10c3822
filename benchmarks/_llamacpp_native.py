"""llama.cpp's own HTTP server (the one `llama-server` runs), in-process through xllamacpp's bindings.

Run as a child of ``benchmarks/server.py``: ``python _llamacpp_native.py MODEL PORT N_PARALLEL N_CTX THREADS``.
It serves the OpenAI-compatible routes with continuous batching over ``N_PARALLEL`` slots until its stdin
closes (or it is terminated), so the benchmark's clients talk to it exactly as they talk to ``llmtrace serve``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import xllamacpp

    model, port, n_parallel, n_ctx, threads = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_parallel = n_parallel  # slots decoded together in one batch
    params.cont_batching = True  # a new request joins the running batch at the next step
    params.n_ctx = n_ctx  # split evenly across the slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = port
    server = xllamacpp.Server(params)  # starts listening on its own threads
    print(f"listening on {server.listening_address}", flush=True)
    sys.stdin.read()  # parent closes the pipe (or terminates us) when the benchmark is done
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
