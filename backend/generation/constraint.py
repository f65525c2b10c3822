"""Constrained decoding with llguidance: a token mask from a JSON schema, regex, Lark grammar or choice list.

The mask is computed before sampling from the matcher's current state and applied to the logits; the sampled
token is then committed to the matcher. A constraint with ``after_marker`` lets the model write free text
until the marker appears and constrains only what follows (reason first, answer in a fixed shape): the
grammar is ``free-text-lazily-up-to-marker, optional whitespace, body``.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import llguidance as llg
import numpy as np

from llmtrace.backend.generation.params import Constraint, InvalidRequestError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # declared in the stub only

# Fixed separators and no free whitespace: otherwise a weak model (or a masked one with little mass left on
# real content) can pad a JSON value with whitespace until max_tokens, the classic "only filler left".
# A constrained output that has produced this many whitespace-only tokens in a row is stuck in filler (a
# grammar that ignores whitespace, and a model that found nothing else it likes): a dead end.
FILLER_LIMIT = 24
_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


def _lark_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _body_lark(constraint: Constraint) -> str:
    """The constrained part as Lark rules defining ``body``."""
    kind, spec = constraint.kind, constraint.spec
    if kind == "json_schema":
        return f"body: {lark_json(_schema_of(spec))}"
    if kind == "json_object":
        return f"body: {lark_json({'type': 'object'})}"
    if kind == "regex":
        if not isinstance(spec, str):
            raise InvalidRequestError("a regex constraint needs a string pattern", "constraint")
        return f"body: /{llg.regex_to_lark(spec)}/"
    if kind == "choice":
        return "body: " + " | ".join(_lark_literal(c) for c in _choices_of(spec))
    if kind == "grammar":
        if not isinstance(spec, str):
            raise InvalidRequestError("a grammar constraint needs Lark grammar text", "constraint")
        return "body: %lark {\n" + spec + "\n}"
    raise InvalidRequestError(f"unknown constraint kind {kind!r}", "constraint")


def _schema_of(spec: object) -> dict[str, Any]:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"JSON schema is not valid JSON: {exc}", "response_format") from exc
    if not isinstance(spec, dict):
        raise InvalidRequestError("JSON schema must be an object", "response_format")
    return spec


def _with_options(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-guidance": {**_JSON_OPTIONS, **schema.get("x-guidance", {})}}


def lark_json(schema: dict[str, Any]) -> str:
    """A ``%json {...}`` Lark expression for ``schema`` with our JSON options (compact, no free whitespace)."""
    return f"%json {json.dumps(_with_options(schema))}"


def _choices_of(spec: object) -> list[str]:
    if not isinstance(spec, list | tuple) or not spec or not all(isinstance(c, str) and c for c in spec):
        raise InvalidRequestError("a choice constraint needs a non-empty list of non-empty strings", "constraint")
    return list(spec)


def grammar_for(constraint: Constraint) -> str:
    """The llguidance grammar (serialized) for a constraint."""
    marker = constraint.after_marker
    if marker is not None:
        if not marker:
            raise InvalidRequestError("after_marker must be a non-empty string", "constraint")
        lark = (
            "start: free ws body\n"
            f"free[lazy]: /(?s:.*){llg.regex_to_lark(_regex_escape(marker))}/\n"
            "ws: /[ \\n]?/\n" + _body_lark(constraint)
        )
        return llg.LLMatcher.grammar_from_lark(lark)
    kind, spec = constraint.kind, constraint.spec
    if kind == "json_schema":
        return llg.LLMatcher.grammar_from_json_schema(_schema_of(spec), defaults=_JSON_OPTIONS)
    if kind == "json_object":
        return llg.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=_JSON_OPTIONS)
    if kind == "regex":
        if not isinstance(spec, str):
            raise InvalidRequestError("a regex constraint needs a string pattern", "constraint")
        return llg.LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        return llg.LLMatcher.grammar_from_lark("start: " + " | ".join(_lark_literal(c) for c in _choices_of(spec)))
    if kind == "grammar":
        if not isinstance(spec, str):
            raise InvalidRequestError("a grammar constraint needs Lark grammar text", "constraint")
        return llg.LLMatcher.grammar_from_lark(spec)
    raise InvalidRequestError(f"unknown constraint kind {kind!r}", "constraint")


def _regex_escape(text: str) -> str:
    out = []
    for ch in text:
        out.append("\\" + ch if ch in r".^$*+?{}[]\|()" else ch)
    return "".join(out)


def make_ll_tokenizer(tokenizer_json: str, vocab_size: int, eos_token_ids: set[int]) -> llg.LLTokenizer:
    return llg.LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=sorted(eos_token_ids))


class ConstraintMatcher:
    """One sequence's constraint state: masks, commits and the numbers ``gen.constrained`` reports."""

    __slots__ = ("constraint", "_matcher", "vocab_size", "compile_ms", "steps", "_masked_sum", "forced_tokens",
                 "dead_end", "error", "filler_run")

    def __init__(self, constraint: Constraint, ll_tokenizer: llg.LLTokenizer, vocab_size: int) -> None:
        self.constraint = constraint
        self.vocab_size = vocab_size
        start = time.perf_counter()
        grammar = grammar_for(constraint)
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, ll_tokenizer)
        if is_error:
            raise InvalidRequestError(f"constraint does not compile: {messages[0] if messages else ''}",
                                      "constraint")
        self._matcher = llg.LLMatcher(ll_tokenizer, grammar, log_level=0)
        self.compile_ms = (time.perf_counter() - start) * 1e3
        if self._matcher.is_error():
            raise InvalidRequestError(f"constraint does not compile: {self._matcher.get_error()}", "constraint")
        self.steps = 0
        self._masked_sum = 0.0
        self.forced_tokens = 0  # steps where the grammar left exactly one token
        self.dead_end = False  # no token left (or the matcher failed), or only filler for FILLER_LIMIT tokens
        self.error = ""
        self.filler_run = 0  # consecutive whitespace-only tokens committed

    @property
    def masked_fraction_mean(self) -> float:
        return self._masked_sum / self.steps if self.steps else 0.0

    @property
    def accepting(self) -> bool:
        return self._matcher.is_accepting()

    @property
    def stopped(self) -> bool:
        return self._matcher.is_stopped()

    def allowed(self, extra_tokens: list[int] | None = None) -> np.ndarray:
        """Boolean mask [V] of the tokens the grammar allows next (after ``extra_tokens``, if given,
        which are consumed only for this question and rolled back)."""
        consumed = 0
        if extra_tokens:
            consumed = self._matcher.try_consume_tokens(list(extra_tokens))
            if consumed != len(extra_tokens):
                self._matcher.rollback(consumed)
                return np.zeros(self.vocab_size, dtype=np.bool_)
        raw = self._matcher.compute_bitmask()
        if consumed:
            self._matcher.rollback(consumed)
        # numpy unpack: single-threaded and ~20 us for 49k tokens (bit i of word w is token 32*w + i)
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[: self.vocab_size]
        return bits.view(np.bool_)

    def mask_logits(self, logits: np.ndarray, extra_tokens: list[int] | None = None) -> tuple[np.ndarray, int]:
        """Logits with disallowed tokens at -inf, and how many tokens are allowed."""
        allowed = self.allowed(extra_tokens)
        n_allowed = int(np.count_nonzero(allowed))
        if extra_tokens is None:
            self.steps += 1
            self._masked_sum += 1.0 - n_allowed / self.vocab_size
            if n_allowed == 1:
                self.forced_tokens += 1
            m = self._matcher
            # llguidance leaves only EOS allowed when it gives up (error, or stopped short of an accepting
            # state): nothing the grammar wants can still be spelled. Report it as a dead end, allow nothing.
            if n_allowed == 0 or m.is_error() or (m.is_stopped() and not m.is_accepting()):
                self.dead_end = True
                self.error = m.get_error() or f"no token can continue the grammar ({m.stop_reason()})"
                n_allowed = 0
        return np.where(allowed, logits, np.float32(-np.inf)).astype(logits.dtype, copy=False), n_allowed

    def commit(self, token_id: int, token_bytes: bytes = b"x") -> bool:
        """Advance the grammar by one sampled token; False when the token broke it or the output is stuck
        in filler (``token_bytes``: the token's text, to see whitespace-only runs)."""
        ok = self._matcher.consume_token(token_id)
        if not ok:
            self.dead_end = True
            self.error = self._matcher.get_error() or f"token {token_id} rejected"
            return False
        self.filler_run = self.filler_run + 1 if token_bytes and not token_bytes.strip() else 0
        if self.filler_run >= FILLER_LIMIT and not self._matcher.is_accepting():
            self.dead_end = True
            self.error = f"only filler: {self.filler_run} whitespace tokens in a row"
            return False
        return True
