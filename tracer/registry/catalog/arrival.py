"""The Arrival phase: stages 1-5 of the registry (loaded in order by ``registry/stages.py``)."""

from __future__ import annotations

from llmtrace.tracer.registry.model import Stage, V

_ROUTER = "on a router's scoring spans mapped by llmtrace collect (llm-d, Dynamo)"

STAGES: tuple[Stage, ...] = (
    Stage(1, "arrival.connection", "arrival", "Connection",
          "Opens a new HTTP connection or reuses a pooled one before any bytes of the request move.",
          "A fresh TLS handshake on every call adds a round trip or three to the first token.",
          ("C", "B"),
          (V("server.address", "str", "", "host the request went to", semconv=True),
           V("server.port", "int", "", "port the request went to", semconv=True),
           V("llmtrace.connection.reused", "bool", "", "true when a pooled connection carried the request"),
           V("llmtrace.connection.connect_ms", "float", "ms", "time spent opening the connection (0 when reused)")),
          ttft_part="intake"),
    Stage(2, "arrival.admission", "arrival", "Admission control",
          "Decides whether the request runs now, waits in a queue, or is turned away because the server is full.",
          "Under load requests sit in the queue; the wait lands entirely on time to first token.",
          ("B",),
          (V("llmtrace.admission.decision", "str", "", "admitted, queued or shed"),
           V("llmtrace.admission.queue_wait_ms", "float", "ms", "time spent waiting for a running slot"),
           V("llmtrace.admission.queue_depth", "int", "requests", "requests waiting when this one arrived"),
           V("llmtrace.admission.running", "int", "requests", "requests running when this one arrived"),
           V("llmtrace.admission.max_running", "int", "requests", "the running limit in force")),
          ttft_part="queue"),
    Stage(3, "arrival.model_routing", "arrival", "Model routing",
          "Maps the model name the caller asked for onto a model the server actually holds.",
          "An alias quietly points at another model, so two identical calls are answered by different weights.",
          ("B",),
          (V("gen_ai.request.model", "str", "", "model name the caller asked for", semconv=True),
           V("gen_ai.response.model", "str", "", "model that answered", semconv=True),
           V("llmtrace.routing.rule", "str", "", "rule that matched (exact, alias, default)"),
           V("llmtrace.routing.fallback", "bool", "", "true when the request fell back to another model")),
          ttft_part="routing"),
    Stage(4, "arrival.replica_selection", "arrival", "Replica selection",
          "Chooses which copy of the model serves the request: by load, in turn, or by who holds the prefix.",
          "Landing on a replica that has never seen your prompt prefix means a cold prefill.",
          ("B",),
          (V("llmtrace.replica.id", "str", "", "replica that served the request"),
           V("llmtrace.replica.policy", "str", "", "prefix_aware, round_robin or least_loaded"),
           V("llmtrace.replica.candidates", "int", "replicas", "replicas considered"),
           V("llmtrace.replica.expected_hit_tokens", "int", "tokens", "cached prefix the chosen replica was expected to hold"),
           V("llmtrace.replica.expected_hit_blocks", "int", "blocks", "prompt blocks the router expected the chosen "
             "replica to hold", when=_ROUTER),
           V("llmtrace.replica.best_hit_blocks", "int", "blocks", "prompt blocks the best-placed replica held (the "
             "router's own maximum over its candidates)", when=_ROUTER),
           V("llmtrace.replica.best_id", "str", "", "the replica that held the most of the prompt", when=_ROUTER),
           V("llmtrace.replica.blocks_lost", "int", "blocks", "best_hit_blocks - expected_hit_blocks: prefix blocks "
             "resident elsewhere that the chosen replica computes again", when=_ROUTER),
           V("llmtrace.replica.total_blocks", "int", "blocks", "the prompt's blocks as the router hashed them",
             when=_ROUTER),
           V("llmtrace.replica.role", "str", "", "prefill or decode, where the router picks for a disaggregated pair",
             when=_ROUTER),
           V("llmtrace.replica.block_tokens", "int", "tokens", "tokens a block of the router's prefix index holds",
             when=_ROUTER)),
          ttft_part="routing"),
    Stage(5, "arrival.stream_setup", "arrival", "Stream setup",
          "Opens the response stream (server-sent events) or prepares a single buffered response.",
          "A proxy that buffers the stream makes a streamed answer arrive all at once at the end.",
          ("B", "C"),
          (V("llmtrace.stream.requested", "bool", "", "whether the caller asked for a stream"),
           V("llmtrace.stream.protocol", "str", "", "sse or none"),
           V("llmtrace.stream.first_byte_ms", "float", "ms", "time from the request to the first response byte")),
          ttft_part="intake"),
)
