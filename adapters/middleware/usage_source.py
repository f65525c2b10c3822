"""Where a pass's token counts came from: the provider, an estimate, or nowhere.

When the provider reports no usage (a stream that did not ask for it and could not be made to, an
OpenAI-compatible server that never sends it), the tokens are counted here from the prompt segments and
the output text, with the tokenizer the app gave ``instrument(..., tokenizer=...)`` or, without one, at
about four characters a token. Estimates are kept apart from the reported counts
(``llmtrace.usage.estimated_*_tokens``, never ``gen_ai.usage.*``), and no cost is computed from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmtrace.tracer.reading.tokens import approx_tokens
from llmtrace.tracer.registry import names as N

PROVIDER, ESTIMATED, NONE = "provider", "estimated", "none"


def count(text: str, tokenizer: Callable[[str], int] | None) -> int:
    if tokenizer is not None:
        try:
            return int(tokenizer(text))
        except Exception:  # the app's tokenizer failing must not cost the pass
            pass
    return approx_tokens(len(text))


def estimated_attributes(
    segments: Sequence[tuple[str, str]],
    output_text: str | None,
    tokenizer: Callable[[str], int] | None,
) -> dict[str, object]:
    """Pass-span values when the provider said nothing: estimated counts, or ``source = none``."""
    if not segments and not output_text:
        return {N.USAGE_SOURCE: NONE, N.USAGE_ESTIMATED: False}
    attrs: dict[str, object] = {
        N.USAGE_SOURCE: ESTIMATED,
        N.USAGE_ESTIMATED: True,
        N.USAGE_ESTIMATOR: "tokenizer" if tokenizer is not None else "chars_per_4",
        N.USAGE_ESTIMATED_INPUT_TOKENS: sum(count(text, tokenizer) for _, text in segments),
    }
    if output_text is not None:
        attrs[N.USAGE_ESTIMATED_OUTPUT_TOKENS] = count(output_text, tokenizer) if output_text else 0
    return attrs
