"""The client middleware: one httpx transport around the client's own (``instrument``), one ``Call`` per
request, the provider parsers (OpenAI chat and Responses, Anthropic), SSE and usage, and the stage writers
(``client_stages``, ``wire``) that turn a finished call's frozen record (``call_record``) into stage spans.

It imports ``llmtrace.tracer`` (reading, record, registry) and nothing of ``helpers``.
"""
