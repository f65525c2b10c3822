"""What a foreign pass cost, priced as the middleware prices the same call.

A client pass span from another tool (OTel GenAI, OpenLLMetry, OpenInference, MLflow, LiteLLM, Bedrock through
Strands) names its model and its token usage but not its price. ``llmtrace collect`` reads the usage with the
cache convention its block follows (``llmtrace.usage.cache_convention``, otlp_names.py), normalises it
(``usage.from_convention``: the same arithmetic as the ``requests`` view's ``prompt_tokens``) and prices it with
the middleware's own table (tracer/record/prices.py: the user's file, genai-prices, the bundled prices.json), so
a pass's ``cost_usd`` and ``hit_ratio`` agree whichever tool produced the span. Engine (server-side) passes are
not priced: the client pass of the same call is, and a joined trace would count the call twice. genai-prices
(and pydantic) load on the first pass priced, not when ``collect`` starts: a collector that never sees a
foreign client pass does not pay their ~0.4 s of CPU.
"""

from __future__ import annotations

from llmtrace.tracer.record import prices
from llmtrace.tracer.record.usage import from_convention
from llmtrace.tracer.registry import names as N

# OpenTelemetry's gen_ai.provider.name values where genai-prices names the provider otherwise
_PROVIDER_IDS = {"aws.bedrock": "aws", "azure.ai.openai": "azure", "azure.ai.inference": "azure",
                 "gcp.gemini": "google", "gcp.vertex_ai": "google", "gcp.gen_ai": "google",
                 "mistral_ai": "mistral", "x_ai": "x-ai"}


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return None
    return int(value)


def accounting_values(a: dict[str, object]) -> dict[str, object]:
    """The ``meters.cache_accounting`` values of a mapped client pass, as the middleware records them (hit
    rate, cached and uncached tokens, ``llmtrace.meters.cost_usd`` with its source, version and parts); empty
    when it already has a cost, names no model, lacks its counts or no price table knows the model."""
    if N.METERS_COST_USD in a or a.get(N.SIDE) != "client":
        return {}
    served, requested = a.get(N.GEN_AI_RESPONSE_MODEL), a.get(N.GEN_AI_REQUEST_MODEL)
    served = served if isinstance(served, str) and served else None
    requested = requested if isinstance(requested, str) and requested else None
    inp, out = _count(a.get(N.GEN_AI_USAGE_INPUT_TOKENS)), _count(a.get(N.GEN_AI_USAGE_OUTPUT_TOKENS))
    if (served is None and requested is None) or inp is None or out is None:
        return {}
    convention = a.get(N.USAGE_CACHE_CONVENTION)
    usage = from_convention(convention if isinstance(convention, str) else None, inp, out,
                            _count(a.get(N.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)),
                            _count(a.get(N.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS)))
    name = a.get(N.GEN_AI_PROVIDER_NAME)
    provider = _PROVIDER_IDS.get(name, name) if isinstance(name, str) and name else None
    price = prices.price_pass(served, usage, requested, provider)
    if price.cost is None and provider is not None:  # a provider genai-prices does not list: by the model alone
        price = prices.price_pass(served, usage, requested, None)
    if price.cost is None:
        return {}
    # no deploy of collect's own: the span's resource carries the app's
    return {k: v for k, v in prices.cache_accounting(usage, price, None).items() if v is not None}
