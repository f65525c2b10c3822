"""The in-app recording path: spans, capture mode, exporter, health counters.

The prompt-text classifiers that sat here moved to ``llmtrace.tracer.reading``; their old paths keep
importing until every caller names the new ones.
"""

from llmtrace.tracer import aliases as _aliases

_aliases.install(__name__, {m: f"llmtrace.tracer.reading.{m}" for m in (
    "char_folds", "digest_cache", "evidence_json", "evidence_run", "evidence_shape", "orthography",
    "passage_recurrence", "prompt_segments", "stop_context", "tool_digest", "untrusted_text")})
