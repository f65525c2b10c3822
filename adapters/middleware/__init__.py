"""The client middleware: one httpx transport around the client's own (``instrument``), one ``Call`` per
request, the provider parsers (OpenAI chat and Responses, Anthropic), SSE and usage, and the stage writers
(``client_stages``, ``wire``) that turn a finished call's frozen record (``call_record``) into stage spans.

It imports ``llmtrace.tracer`` (reading, record, registry) and nothing of ``helpers``.
"""

from llmtrace.tracer import aliases as _aliases
from llmtrace.tracer import record as _record

# moved to tracer/record, where the collector prices foreign passes with the same table: the old paths import
_aliases.install(__name__, {m: f"{_record.__name__}.{m}" for m in ("prices", "usage")})
