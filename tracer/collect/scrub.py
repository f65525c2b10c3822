"""Credentials out of every span the collector stores, in every capture mode.

Apps send what their HTTP instrumentation saw: ``http.request.header.authorization: ["Bearer sk-…"]``,
``openai.api_key``, a key pasted into a prompt. Values under credential-looking keys are replaced
whole; any other string goes through the app side's own scrubber (``capture.scrub``: API keys, bearer
tokens, AWS/GitHub/Slack tokens, JWTs, ``password=…``).

The collector's hot path checks each span's attribute JSON against cheap substring tests (``suspect``,
a superset of everything below); only spans that match are scrubbed value by value.
"""

from __future__ import annotations

import re
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from llmtrace.tracer.record.capture import scrub as scrub_text

REDACTED = "[REDACTED]"

# Keys whose whole value is a credential: HTTP auth/cookie headers (OTel semconv
# http.request.header.<name>, any case), and names that say key, secret, password or token.
_SENSITIVE_KEY = re.compile(
    r"(?i)(?:authorization|cookie|api[_-]?key|passw(?:or)?d|secret|private[_-]?key"
    r"|(?:^|[._-])(?:x[_-]auth[_-]|access[_-]|auth[_-]|refresh[_-]|id[_-]|bearer[_-]|session[_-]|api[_-])?token)$"
    r"|(?i:api[_-]?key)")

# Lower-case pieces, one of which is in any text the scrubbers below could change: a superset test,
# false positives only cost the slow path. A few ``in`` tests on a lowered string are much faster than one
# regex alternation here (measured 13-50 us for an alternation over a 500-byte attribute JSON), and each
# piece covers several patterns ("key": api_key, api-key, apikey, private_key; "auth": authorization,
# auth_token).
# Three bytes at least: a protobuf request is mostly random trace and span ids, where any given two-byte
# piece turns up in about one request in four (measured), and each hit costs the slow path for the request.
_PIECES = ("sk-", "pk-", "rk-", "key", "auth", "bearer", "secret", "passw", "cookie", "akia", "xox", "eyj")
# The rest need a look at the next character: "gh?_" GitHub tokens, and "token" as a key's end or before
# ":"/"=" (not input_tokens, nor a time to first token: every vLLM and SGLang request span has
# gen_ai.latency.time_to_first_token, which sent each through the slow path). In protobuf bytes a key is
# followed by its value's tag, 0x12. (Two regexes with a literal prefix each: an alternation of the two is ten
# times slower.)
# The "token" rule is (?<!first_)token(?:[\s:=\"\x12]|$), matched as its literal part with the look-behind
# checked in Python: a pattern that starts with a look-behind gets no literal-prefix scan from ``re``, so it
# was tried at every byte (2.1 ms of an 80 KB engines' request, 0.08 ms so; same answers, a test holds it).
_GH, _TOKEN = re.compile(r"gh[pousr]_"), re.compile(r"token(?:[\s:=\"\x12]|$)")
_GH_PB, _TOKEN_PB = re.compile(_GH.pattern.encode()), re.compile(_TOKEN.pattern.encode())
_PIECES_PB = tuple(x.encode() for x in _PIECES)


def _token(low: str) -> bool:
    return any(low[max(0, m.start() - 6):m.start()] != "first_" for m in _TOKEN.finditer(low))


def _token_pb(low: bytes) -> bool:
    return any(low[max(0, m.start() - 6):m.start()] != b"first_" for m in _TOKEN_PB.finditer(low))


def suspect(text: str) -> bool:
    low = text.lower()
    for piece in _PIECES:
        if piece in low:
            return True
    return _GH.search(low) is not None or _token(low)


def suspect_bytes(raw: bytes) -> bool:
    """``suspect`` over UTF-8 bytes: a span's attribute JSON, or a whole protobuf request (keys and
    strings are stored verbatim there), where False means no span of the request needs looking at."""
    low = raw.lower()
    for piece in _PIECES_PB:
        if piece in low:
            return True
    return _GH_PB.search(low) is not None or _token_pb(low)


# ``suspect_bytes`` as one RE2 pattern, for a whole request: RE2 (pyarrow's match_substring_regex, a DFA,
# case-insensitive, binary input read as Latin-1) makes one pass over the body where suspect_bytes makes
# fourteen (0.37 ms against 0.94 ms a 100 KB request of 512 spans, ~1 us a span). The look-behind RE2
# lacks is spelled out: "token" not preceded by "first_" is "token" at the start, after a byte that is
# not "_", after "_" not preceded by "t", ... after "irst_" not preceded by "f" (or that piece at the
# start). The same answer as suspect_bytes (tests/collector/test_collector_scrub.py holds it).
_RE2_PIECES = "|".join(p.decode() for p in _PIECES_PB) + "|gh[pousr]_"
_RE2_TOKEN = ("(?:^|^_|^t_|^st_|^rst_|^irst_|[^_]|[^t]_|[^s]t_|[^r]st_|[^i]rst_|[^f]irst_)"
              "token(?:[\\t\\n\\x0b\\x0c\\r :=\"\\x12]|$)")  # Python's \s: RE2's lacks \x0b
_RE2_SUSPECT = pc.MatchSubstringOptions(f"{_RE2_PIECES}|{_RE2_TOKEN}", ignore_case=True)


def suspect_protobuf(raw: bytes) -> bool:
    """``suspect_bytes`` of a whole request body, in one pass."""
    try:
        found = pc.call_function("match_substring_regex", [pa.array([raw], pa.binary())], _RE2_SUSPECT)
    except pa.ArrowException:  # (a body over 2 GiB, which the collector's limits never let in)
        return suspect_bytes(raw)
    return bool(found[0].as_py())


@lru_cache(maxsize=4096)
def sensitive_key(key: str) -> bool:
    return _SENSITIVE_KEY.search(key) is not None


def scrub_attributes(value: object) -> object:
    """A copy of an attribute value (dict, list, str, ...) with every credential replaced."""
    if isinstance(value, dict):
        return {k: (REDACTED if sensitive_key(str(k)) and v not in (None, "", [])
                    else scrub_attributes(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_attributes(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value
