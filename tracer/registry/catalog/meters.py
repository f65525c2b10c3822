"""The Meters phase: stages 42-42 of the registry (loaded in order by ``registry/stages.py``)."""

from __future__ import annotations

from llmtrace.tracer.registry.model import Stage, V

STAGES: tuple[Stage, ...] = (
    Stage(42, "meters.cache_accounting", "meters", "Cache accounting",
          "Counts cached and uncached tokens and prices the pass, tagged with the deploy.",
          "Without it a prompt edit that doubles the bill stays invisible until the invoice.",
          ("A", "C"),
          (V("llmtrace.meters.cache_hit_rate", "float", "0..1", "cached prompt tokens over all prompt tokens"),
           V("llmtrace.meters.cached_tokens", "int", "tokens", "prompt tokens billed as cached"),
           V("llmtrace.meters.uncached_tokens", "int", "tokens", "prompt tokens billed in full"),
           V("llmtrace.meters.cost_usd", "float", "USD", "price of the pass"),
           V("service.version", "str", "", "deploy the pass ran under", semconv=True, when="when the app runs under a deploy (service.version)", summary=12),
           V("llmtrace.meters.usage_consistent", "bool", "", "false when the provider's totals are impossible"),
           V("llmtrace.meters.price_source", "str", "", "what priced the pass: user (own file), genai-prices or bundled"),
           V("llmtrace.meters.price_version", "str", "", "version of the price data used"),
           V("llmtrace.meters.price_model", "str", "", "the price entry that matched the model"),
           V("llmtrace.meters.cache_read_cost_usd", "float", "USD", "part of the cost for cache reads"),
           V("llmtrace.meters.cache_write_5m_cost_usd", "float", "USD", "part of the cost for 5-minute cache writes"),
           V("llmtrace.meters.cache_write_1h_cost_usd", "float", "USD", "part of the cost for 1-hour cache writes"),
           V("llmtrace.usage.source", "str", "", "where the token counts came from: provider, estimated or none"),
           V("llmtrace.usage.estimated", "bool", "", "true when the counts were estimated, not reported"))),
)
