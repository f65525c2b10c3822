"""Boundary values read off the wire alone, for the stages the app-side helpers would otherwise be needed for.

Each function takes what one finished call showed and returns the values for one stage span; the caller
(``client_stages``) records them. Nothing here keeps text: prompts are compared in memory
(``divergence``) and only classes, offsets and counts come back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmtrace.tracer import capture

from . import divergence
from .usage_source import approx_tokens

if TYPE_CHECKING:
    from .call import Call


def _tokens(chars: int, ratio: float | None) -> int:
    return round(chars * ratio) if ratio is not None else approx_tokens(chars)


def prefix_values(call: Call) -> dict[str, object]:
    """``cache.prefix_match`` values from comparing this prompt with the last ones of its template."""
    obs = call.obs
    if not obs.segments or capture.mode() == "none":
        return {}
    key = divergence.template_key(call.parser.operation, obs.model, obs.segments)
    total_chars = sum(len(t) for _, t in obs.segments)
    est = approx_tokens(total_chars)
    ratio: float | None = None
    tok = call.opts.tokenizer
    if tok is not None and total_chars:
        try:
            est = sum(int(tok(t)) for _, t in obs.segments)
            ratio = est / total_chars
        except Exception:  # the app's tokenizer failing costs only the refinement
            ratio = None
    values: dict[str, object] = {
        "llmtrace.divergence.template": capture.hash_text(key),
        "llmtrace.divergence.prompt_tokens_est": est,
    }
    d = divergence.history.observe(key, obs.segments)
    if d is not None:
        values.update(
            {
                "llmtrace.divergence.segment": d.segment,
                "llmtrace.divergence.char_offset": d.char_offset,
                "llmtrace.divergence.segment_offset": d.segment_offset,
                "llmtrace.divergence.token_offset": _tokens(d.char_offset, ratio),
                "llmtrace.divergence.length": d.length,
                "llmtrace.divergence.class": d.klass,
                "llmtrace.divergence.shared_prefix_tokens": _tokens(d.shared_prefix_chars, ratio),
                "llmtrace.divergence.reusable_after_tokens": _tokens(d.reusable_after_chars, ratio),
            }
        )
    return values
