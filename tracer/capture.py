"""Content capture and privacy: what of the prompt and output text the store may keep.

``none`` keeps nothing; ``hashes`` (the default) keeps per-segment hashes and chunk hash chains — enough
to say *where* two prompts part without keeping a word; ``full`` keeps the text. Secrets that look like
API keys or bearer tokens are scrubbed in every mode before anything is hashed or stored.
"""

from __future__ import annotations

import hashlib
import re

_mode: str = "hashes"

_SECRET_PATTERNS = (
    re.compile(r"\b(?:sk|pk|rk)-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI / Anthropic style keys
    re.compile(r"\bBearer\s+[A-Za-z0-9._\-+/=]{16,}", re.IGNORECASE),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),  # Slack tokens
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"),  # JWTs
    re.compile(r"(?i)\b(api[_-]?key|secret|password|token)\s*[:=]\s*['\"]?[^\s'\"]{8,}"),
)


def set_mode(mode: str) -> None:
    global _mode
    if mode not in ("none", "hashes", "full"):
        raise ValueError(f"capture mode must be none, hashes or full, got {mode!r}")
    _mode = mode


def mode() -> str:
    return _mode


def scrub(text: str) -> str:
    """Replace anything that looks like a credential with a fixed marker."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[REDACTED]", text)
    return text


def hash_text(text: str) -> str:
    """16 hex characters of BLAKE2b over the scrubbed UTF-8 text."""
    return hashlib.blake2b(scrub(text).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def chunk_hash_chain(text: str, chunk_chars: int = 64) -> list[str]:
    """Hashes of consecutive fixed-size chunks, each covering the previous hash (like KV block hashes).

    The first index where two chains differ is the chunk where the texts part.
    """
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be >= 1")
    text = scrub(text)
    chain: list[str] = []
    parent = b""
    for start in range(0, len(text), chunk_chars):
        h = hashlib.blake2b(parent + text[start : start + chunk_chars].encode("utf-8", "surrogatepass"), digest_size=8)
        parent = h.digest()
        chain.append(h.hexdigest())
    return chain


def first_divergence(a: list[str], b: list[str]) -> int:
    """Index of the first differing element of two hash chains (len of the shorter when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def keep_text(text: str) -> str | None:
    """The text to store under the current mode (scrubbed), or None."""
    return scrub(text) if _mode == "full" else None
