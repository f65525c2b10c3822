"""A token count estimated from characters, where no tokenizer and no provider count is at hand."""

from __future__ import annotations


def approx_tokens(chars: int) -> int:
    """About four characters a token (English prose with a BPE tokenizer); never 0 for non-empty text."""
    return (chars + 3) // 4
