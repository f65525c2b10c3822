"""Digests of a tool call's arguments and result: what tells a loop (the same call again, or calls that get
nowhere) from fan-out (one tool over distinct arguments), without keeping a word of either.

Both the middleware (``adapters/helpers/loops.py``) and the collector (foreign ``execute_tool`` spans) write them
through these two functions, so a call recorded either way digests alike. The form hashed is loose on
purpose: JSON is parsed and its keys sorted, and each string is reduced to its words, case-folded and in
sorted order, so ``{"q": "Paris weather"}`` and ``{"q":"weather  paris"}`` are the same call; a different
order id, page or date is not. The digest is the store's keyed hash (``capture.hash_text``); with capture
``none`` nothing is written.

What a call gave back is read by kind (``result_kind``): an error (the call raised, its span ended in an error, or
its result says so: an ``error`` key, an ``is_error`` flag, text that opens with "Error"), an empty result (an
empty list or object, ``null``, an object holding only empty values) or a value. Errors are digested with the
call's own argument words and every number taken out, so "order KO-1 not found" and "order KO-2 not found" are
the same error; every empty result digests alike ("nothing found" again). A value is digested as it is: six
orders that each came back with their own id are six results. A record of short fields (``{"status": "paid"}``)
is digested with the arguments it answered, so six invoices that are each paid are six answers too; a notice
in words ("service busy, please try again later") stays one result whatever was asked.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmtrace.tracer.record import capture

_WORD = re.compile(r"\w+")
_MAX_CHARS = 64 * 1024  # a result larger than this is digested from its first 64 KiB (a flooding result)
RESULT_KINDS = ("value", "empty", "error")
_ERROR_KEYS = frozenset({"error", "errors", "exception", "error_message", "errormessage"})
_ERROR_FLAGS = ("is_error", "iserror")
# text a tool returns in place of a result when it failed: the convention of tool wrappers (LangChain's
# "Error: ...", MCP servers' "Error executing tool ...", a traceback pasted back)
_ERROR_OPENING = re.compile(r"^\W{0,3}(error|exception|traceback|failed|failure|fatal)\b", re.IGNORECASE)
_EMPTY_TEXT = frozenset({"null", "none", "[]", "{}", "nil", "undefined"})


def _loose(value: object) -> object:
    """The value in the form two near-same calls share (see the module doc)."""
    if isinstance(value, Mapping):
        return {str(k): _loose(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_loose(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (int, float)):
        return value
    return " ".join(sorted(_WORD.findall(str(value).casefold())))


def _parsed(value: object) -> object:
    """A JSON string as the object it holds (tool arguments travel as JSON text), else the value."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()[:_MAX_CHARS]
        if text[:1] in ("{", "[", '"'):
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text
    return value


def canonical(value: object) -> str:
    """``value``'s loose form as one text (what both digests below hash)."""
    try:
        return json.dumps(_loose(_parsed(value)), sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):  # a value json cannot walk (a cycle): its text, loosened
        return str(_loose(str(value)))


def digest(value: object) -> str | None:
    """The keyed digest of ``value``'s loose form, or None when capture is ``none`` or there is no value."""
    if value is None or capture.mode() == "none":
        return None
    return capture.hash_text(canonical(value))


def loose_key(value: object) -> str:
    """An unkeyed digest of ``value``'s loose form, for comparing calls in memory (never stored)."""
    return hashlib.blake2b(canonical(value).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip().casefold() in _EMPTY_TEXT
    if isinstance(value, Mapping):
        return all(_empty(v) or v == 0 for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_empty(v) for v in value)
    return False


def _says_error(value: object) -> bool:
    if isinstance(value, Mapping):
        keys = {str(k).casefold(): v for k, v in value.items()}
        if any(keys.get(flag) is True for flag in _ERROR_FLAGS):
            return True
        return any(not _empty(v) and v is not False for k, v in keys.items() if k in _ERROR_KEYS)
    return isinstance(value, str) and bool(_ERROR_OPENING.match(value))


def result_kind(result: object = None, error: str | None = None, *, is_error: bool = False) -> str:
    """What a call gave back, by kind (see the module doc): error, empty or value. ``None`` with no error is an
    empty result only when it came as text ("null"); a tool that returned nothing at all is a value (an action
    done, nothing to say), so a fan-out over write calls is not read as getting nowhere."""
    if error is not None or is_error:
        return "error"
    parsed = _parsed(result)
    if _says_error(parsed):
        return "error"
    if result is None or (isinstance(parsed, str) and not parsed.strip()):
        return "value"
    return "empty" if _empty(parsed) else "value"


def _words(value: object) -> set[str]:
    return set(_WORD.findall(canonical(value).casefold())) if value is not None else set()


def _result_form(result: object, error: str | None, arguments: object, is_error: bool) -> object:
    """What two calls must share to have got the same thing back (see the module doc)."""
    kind = result_kind(result, error, is_error=is_error)
    if kind == "error":
        text = error if error is not None else canonical(result)
        asked = _words(arguments)
        kept = [w for w in _WORD.findall(text.casefold()) if w not in asked and not any(c.isdigit() for c in w)]
        return {"error": " ".join(sorted(kept))}
    if kind == "empty":
        return {"empty": True}
    parsed = _parsed(result)
    if _status_record(parsed):
        # a record of short fields ({"status": "paid"}) answers the call it was asked by: six invoices that are
        # each paid are six answers, not the same one six times (fan-out, not a loop that gets nowhere)
        return {"record": _loose(parsed), "asked": _loose(_parsed(arguments))}
    return result


def _status_record(value: object) -> bool:
    """A JSON record (an object or a list) whose every text is short (a status, a code, a name: at most three
    words). A notice the service gives whatever it is asked ("busy, please try again later", "0 matches.") is
    a sentence or plain text: those stay the same result for every call, the sign of calls that get nowhere."""
    if not isinstance(value, (Mapping, list, tuple)) or not value:
        return False
    texts: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, Mapping):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, str):
            texts.append(v)

    walk(value)
    return all(len(_WORD.findall(t)) <= 3 for t in texts)


def arguments_digest(arguments: object) -> str | None:
    """The digest of a call's arguments (a mapping, or their JSON text)."""
    return digest(arguments)


def result_digest(result: object = None, error: str | None = None, arguments: object = None, *,
                  is_error: bool = False) -> str | None:
    """The digest of what a call gave back: its result, or, when it raised or its result is an error, the error
    without the call's argument words and numbers (``arguments``: the call's), so the same error again is the
    same digest whatever it was asked, and never equals a result's; every empty result digests alike."""
    if result is None and error is None and not is_error:
        return None
    return digest(_result_form(result, error, arguments, is_error))


def result_key(result: object = None, error: str | None = None, arguments: object = None, *,
               is_error: bool = False) -> str:
    """``result_digest``'s form as an unkeyed in-memory key (the messages array's tool results, never stored)."""
    return loose_key(_result_form(result, error, arguments, is_error))



@dataclass(frozen=True, slots=True)
class Repeats:
    """Tool calls of one history that repeat an earlier one: ``calls`` by the same (or near-same) arguments or
    by getting back what an earlier call of the same tool already got (each call counted once); ``results``
    those of them that got back the same result or error as a call of the same tool in an earlier step, whatever
    they asked (calls in one step ran together, none had seen another's result: fan-out, not a retry)."""

    calls: int = 0
    results: int = 0


def count_repeats(steps: Sequence[Sequence[tuple[str, str, str]]], results: Mapping[str, str]) -> Repeats:
    """``steps``: the calls each assistant message asked for, in order, as (call id, tool name, arguments'
    key); ``results``: call id -> result key (``result_key``), where the history holds the call's result."""
    seen_args: set[tuple[str, str]] = set()
    seen_results: set[tuple[str, str]] = set()
    calls = by_result = 0
    for step in steps:
        got: list[tuple[str, str]] = []
        for cid, name, args in step:
            key = results.get(cid) if cid else None
            same_result = key is not None and (name, key) in seen_results
            calls += (name, args) in seen_args or same_result
            by_result += same_result
            seen_args.add((name, args))
            if key is not None:
                got.append((name, key))
        seen_results.update(got)
    return Repeats(calls, by_result)
