"""OpenAI- and Anthropic-compatible HTTP server over the engine (``llmtrace serve``).

    llmtrace serve [--model PATH|tiny] [--port 8000] [--db traces.duckdb] [--replicas N]
                   [--routing prefix_aware|round_robin] [--max-running N] [--max-queued N]
                   [--normalize nfc|nfkc|none] [--strip-invisible] [--chat-template FILE]
                   [--alias NAME=MODEL ...] [--batch-invariant] [--dtype auto|float32|bfloat16] [--decode int4|dense]
                   [--speculative off|ngram|draft] [--speculative-k N]

Endpoints: POST /v1/chat/completions, /v1/completions, /v1/responses (GET/DELETE /v1/responses/{id}),
/v1/messages, /v1/messages/count_tokens; GET /v1/models, /health, /stats (JSON
engine and admission counters), /metrics (Prometheus text). Every generation response carries
``x-llmtrace-trace-id``; a ``traceparent`` request header makes the server's pass span a child of the
caller's span.

Layout, one concept per file: ``cli`` (the command, ``build_service``), ``app`` (routes), ``service`` (the
request flow and its Arrival stages), ``intake`` (normalization, chat template, tokenization stages),
``admission``, ``routing``, ``replica`` / ``replica_set`` (engines and selection), ``openai_protocol`` /
``anthropic_protocol`` / ``responses_protocol`` (wire formats; ``responses_routes``, ``token_count``), ``tool_gate``, ``normalization``, ``errors``, ``fields``,
``asgi_io``, ``metrics``, ``config``, ``job``.
"""
