"""Content capture and privacy: what of the prompt and output text the store may keep.

``none`` keeps nothing; ``hashes`` (the default) keeps per-segment hashes and chunk hash chains — enough
to say *where* two prompts part without keeping a word; ``full`` keeps the text. Secrets that look like
API keys or bearer tokens are scrubbed in every mode before anything is hashed or stored. Each becomes
``[REDACTED:<8 hex>]``, a keyed hash of the secret: the same key in every call stays the same marker (a
fixed prefix), and a token minted per request becomes a marker that changes, so the cache analysis still
sees the prompts part there. 32 bits of a keyed hash tell secrets apart; they cannot be reversed without
the key, and even with it a secret of any length cannot be recovered from them.

The hashes are keyed BLAKE2b: a 64-bit hash of a short secret ("Your verification code is 482913") is
found by brute force in seconds, a keyed one is not without the key. The key is a per-store secret kept
beside the store (``<store>.key``, mode 0600, created with the store by ``llmtrace.init``) and never in a
span, so equal text hashes alike within a store; a fleet that wants equal hashes across stores shares one
key through ``LLMTRACE_HASH_KEY``. Without either (no store), a process gets a random key of its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from llmtrace.tracer.record import health
from llmtrace.tracer.record.runtime import runtime
from llmtrace.tracer.settings import env

KEY_ENV = "LLMTRACE_HASH_KEY"
DEFAULT_MODE = "hashes"


@dataclass(slots=True)
class CaptureState:
    """The capture mode and the hash key, held by the process's ``runtime`` (runtime.py)."""

    mode: str = DEFAULT_MODE
    key: bytes | None = None  # set by init (use_store_key); a random per-process key until then
    key_lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        """Back to the default mode; the next hash takes LLMTRACE_HASH_KEY or a fresh random key."""
        with self.key_lock:
            self.mode, self.key = DEFAULT_MODE, None


_state = runtime.attach("capture", CaptureState())

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
    if mode not in ("none", "hashes", "full"):
        raise ValueError(f"capture mode must be none, hashes or full, got {mode!r}")
    _state.mode = mode


def mode() -> str:
    return _state.mode


# what ``scrub`` leaves where a secret was (the analyzers name such a value a credential)
REDACTED_MARKER = re.compile(r"\[REDACTED:[0-9a-f]{8}\]")


def _marker(m: re.Match[str]) -> str:
    digest = hashlib.blake2b(m.group(0).encode("utf-8", "surrogatepass"), key=_current_key(), digest_size=4)
    return f"[REDACTED:{digest.hexdigest()}]"


def scrub(text: str) -> str:
    """Replace anything that looks like a credential with its marker (equal secrets, equal markers)."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_marker, text)
    return text


def secret_at(text: str, pos: int) -> tuple[int, int] | None:
    """The span of the credential-looking value of ``text`` that covers ``pos``, if one does."""
    for pattern in _SECRET_PATTERNS:
        for m in pattern.finditer(text, max(0, pos - 512), pos + 512):
            if m.start() <= pos < m.end():
                return m.start(), m.end()
            if m.start() > pos:
                break
    return None


def key_path(store: str | os.PathLike[str]) -> Path:
    """Where a store's hash key lives: beside it, ``<store>.key``."""
    return Path(f"{os.fspath(store)}.key")


def _parse_key(text: str) -> bytes:
    """A key as configured: 32-128 hex digits are used as they are, anything else is hashed into 32 bytes."""
    text = text.strip()
    try:
        raw = bytes.fromhex(text)
        if 16 <= len(raw) <= 64:
            return raw
    except ValueError:
        pass
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32, person=b"llmtrace-key").digest()


def store_key(store: str | os.PathLike[str]) -> bytes:
    """The hash key for ``store``: ``LLMTRACE_HASH_KEY`` when set, else ``<store>.key``, created (0600) if absent.

    Creation is atomic (written aside, then hard-linked into place), so processes starting together on one
    store agree on one key."""
    given = env(KEY_ENV)
    if given:
        return _parse_key(given)
    path = key_path(store)
    try:
        return _parse_key(path.read_text())
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.hex() + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process created it first: use theirs
            return _parse_key(path.read_text())
    finally:
        tmp.unlink(missing_ok=True)
    return key


def use_store_key(store: str | os.PathLike[str] | None) -> None:
    """Key the hashes for ``store`` (``llmtrace.init`` calls this; so should any other writer of that store).

    ``None`` (no store): ``LLMTRACE_HASH_KEY`` or a random key for this process. A key file that cannot be
    read or created is warned about once and a random key used: hashes then match only within the process."""
    try:
        given = env(KEY_ENV)
        key = store_key(store) if store is not None else (_parse_key(given) if given else secrets.token_bytes(32))
    except OSError as exc:
        health.count("hash_key_unavailable", 1, f"cannot read or create the hash key for {store} ({exc}); "
                     "hashes use a random key of this process and will not match other processes")
        key = secrets.token_bytes(32)
    with _state.key_lock:
        _state.key = key


def _current_key() -> bytes:
    key = _state.key
    if key is None:
        with _state.key_lock:
            if _state.key is None:
                given = env(KEY_ENV)
                _state.key = _parse_key(given) if given else secrets.token_bytes(32)
            key = _state.key
    return key


def hasher() -> hashlib.blake2b:
    """A fresh keyed 64-bit BLAKE2b, for hashes of prompt content other than text (e.g. token-id blocks)."""
    return hashlib.blake2b(key=_current_key(), digest_size=8)


def hash_text(text: str) -> str:
    """16 hex characters of keyed BLAKE2b over the scrubbed UTF-8 text."""
    return hashlib.blake2b(scrub(text).encode("utf-8", "surrogatepass"), key=_current_key(), digest_size=8).hexdigest()


def chunk_hash_chain(text: str, chunk_chars: int = 64) -> list[str]:
    """Hashes of consecutive fixed-size chunks, each covering the previous hash (like KV block hashes).

    The first index where two chains differ is the chunk where the texts part.
    """
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be >= 1")
    text = scrub(text)
    key = _current_key()
    chain: list[str] = []
    parent = b""
    for start in range(0, len(text), chunk_chars):
        h = hashlib.blake2b(parent + text[start : start + chunk_chars].encode("utf-8", "surrogatepass"), key=key,
                            digest_size=8)
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
    return scrub(text) if _state.mode == "full" else None
