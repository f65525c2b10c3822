"""The arguments of ``llmtrace serve``, apart from the server: building the parser imports nothing but argparse,
so ``llmtrace serve --help`` works where the backend extra (torch, uvicorn) is not installed."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="GGUF path, or 'tiny' for the random test model (default: the bundled SmolLM2-135M)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients use (default: file stem)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one; default 8000)")
    parser.add_argument("--db", default=None, help="trace store (default: LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--deploy", default=None, help="deploy label recorded on every span")
    parser.add_argument("--otlp-endpoint", default=None, metavar="URL",
                        help="also export every span over OTLP/HTTP to this endpoint, e.g. http://127.0.0.1:4318 "
                             "(default: OTEL_EXPORTER_OTLP_ENDPOINT; the store still gets them)")
    parser.add_argument("--capture", choices=("none", "hashes", "full"), default=None,
                        help="how much prompt/output text the store keeps (default: hashes)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="engines (each with its own KV pool); default 1. The first steps on the main thread, "
                        "the others on threads of their own; on CPU they share the same cores, so more replicas "
                        "add isolation and prefix-aware routing, not tokens/s")
    parser.add_argument("--routing", choices=("prefix_aware", "round_robin"), default="prefix_aware",
                        help="replica selection policy (default prefix_aware)")
    parser.add_argument("--max-running", type=int, default=None,
                        help="requests generating at once across replicas (default 16 per replica)")
    parser.add_argument("--max-queued", type=int, default=64, help="requests waiting for a slot before 429s")
    parser.add_argument("--normalize", choices=("nfc", "nfkc", "none"), default="nfc",
                        help="Unicode normal form applied to prompt text (default nfc)")
    parser.add_argument("--strip-invisible", action="store_true",
                        help="remove zero-width, bidi and other invisible characters from prompts")
    parser.add_argument("--chat-template", default=None, metavar="FILE",
                        help="a jinja2 chat template to use instead of the model's (recorded as not matching)")
    parser.add_argument("--alias", action="append", default=[], metavar="NAME=MODEL",
                        help="another name for a served model (repeatable)")
    parser.add_argument("--batch-invariant", action="store_true",
                        help="results independent of batch composition (slower; seeded requests reproduce)")
    parser.add_argument("--speculative", choices=("off", "ngram", "draft"), default="off",
                        help="speculative decoding for requests that do not choose (their 'speculative' field): "
                        "ngram (prompt lookup) or draft (the model's first layers draft); default off")
    parser.add_argument("--speculative-k", type=int, default=4, help="tokens drafted per step (default 4)")
    parser.add_argument("--moderation-words", default=None, metavar="W1,W2|@FILE",
                        help="streaming moderation: cut a stream with finish_reason content_filter once its text "
                             "contains one of these words; checked every --moderation-every-tokens tokens, so the "
                             "text before the verdict has already been shown (a request's moderation field, "
                             "false or {\"words\": [...], \"every_tokens\": N}, overrides it)")
    parser.add_argument("--moderation-every-tokens", type=int, default=8,
                        help="tokens generated between two moderation checks (default 8): the moderator's lag")
    parser.add_argument("--stop-holdback", type=int, default=None, metavar="CHARS",
                        help="most characters held back while a stop string may be starting (default: as many as "
                             "the longest stop string needs); a smaller window streams a stop string's first "
                             "characters before the match is known (reproduces chopped stop strings)")
    parser.add_argument("--detokenizer-holdback", choices=("utf8", "off"), default="utf8",
                        help="utf8 (default): hold back the bytes of a character split across tokens until it is "
                             "complete; off: decode each token on its own, as a naive streaming decoder does, so "
                             "emoji and non-Latin text show U+FFFD mid-stream (reproduces mangled streams); a "
                             "request's detokenizer_holdback field (true/false) overrides it")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="auto (default): bfloat16 on a CPU with bfloat16 dot products (AVX-512 BF16, AMX) or a "
                        "GPU, else float32 (3-7x the prefill speed of bfloat16 there); LLMTRACE_CPU_PATH=nobf16 "
                        "or avx2 runs another CPU kind's path here. The ready line names the path chosen")
    parser.add_argument("--decode", choices=("int4", "dense"), default="int4",
                        help="int4 (default): on CPU the decode matmuls use a 4-bit GGUF's codes as they are, "
                        "whatever --dtype; dense: the dequantized weights in --dtype (with float32: reference math)")
    parser.add_argument("--num-blocks", type=int, default=None, help="KV blocks per replica")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="sequences one engine runs at once")
    parser.add_argument("--default-max-tokens", type=int, default=256,
                        help="max_tokens for chat requests that give none (default 256)")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help="require this key on every route but /health, as 'Authorization: Bearer KEY' "
                        "(OpenAI clients) or 'x-api-key: KEY' (Anthropic clients); default: env LLMTRACE_API_KEY, "
                        "else none")
    parser.add_argument("--drain-s", type=float, default=30.0,
                        help="on SIGTERM, how long running requests may finish before they are cut (default 30)")
    parser.add_argument("--header-timeout-s", type=float, default=10.0,
                        help="close a connection whose request headers are not complete this long after it "
                        "opened or its next request began (slowloris; default 10)")
    parser.add_argument("--body-timeout-s", type=float, default=60.0,
                        help="answer 408 and close when a request body takes longer than this (default 60)")
    parser.add_argument("--limit-concurrency", type=int, default=1024,
                        help="connections plus running requests; past it new requests get 503 (default 1024)")
