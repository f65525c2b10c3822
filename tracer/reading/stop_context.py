"""Why generation ended, read as one word, and what the output looked like where a stop string cut it.

Both recorders of ``gen.stop`` call this: the bundled server (which knows the stop string that matched) and the
client middleware (which knows the request's stop strings, the provider's finish reason and, from Anthropic,
``stop_sequence``). Only classes, lengths and offsets leave this module; the text it reads stays in memory, so
hashes mode stores no word of the output (the stop string itself goes out as its class and length, and a
keyed hash of it that tells two stop strings apart without spelling either).

End kinds (``llmtrace.stop.kind``):
    length            a token cap cut the answer
    stop_string       one of the request's stop strings matched (the string is not part of the output)
    stop_token        one of the request's stop token ids matched
    end_turn          the model ended its turn (end token, a grammar completed)
    tool_call         the turn ended in a tool call
    content_filter    a safety system stopped it
    client_disconnect the caller went away (the engine aborted the sequence)
    error             the generation failed (a dead-end grammar, an error status)
    stop_unknown      the provider said "stop" while stop strings were set, without saying which ended it
                      (OpenAI's chat completions): a stop string or the end of the turn
    other             none of the above

Preceded-by classes (``llmtrace.stop.preceded_by``), the characters right before the cut: empty, digit
(mid-number: "7" of "7.5", "v2" of "v2.1"), abbreviation ("approx", "e.g", "Dr", a lone initial), sentence_end
(".", "!", "?", or a closing quote or bracket after one), letter, space, punct, other. And what the cut is
inside (``llmtrace.stop.inside``): code_fence (an open ``` or ~~~ block), json_string (a string of a JSON answer),
json (an unfinished JSON value, outside strings) or none.
"""

from __future__ import annotations

import unicodedata
from typing import Final

END_KINDS: Final = ("length", "stop_string", "stop_token", "end_turn", "tool_call", "content_filter",
                    "client_disconnect", "error", "stop_unknown", "other")
# where a stop string fired inside the answer's own content rather than at its end
# (an empty answer is not among them: a model that opens with a newline under stop "\n" says nothing of the
# content; the analyzer's "far earlier than the other answers" rule judges it where there are others)
CUT_CLASSES: Final = frozenset({"digit", "abbreviation"})
# ...but only for a stop string that is not white space: a newline after "42" or after "No" ends the line there,
# not the number or the abbreviation (the answer "No" to a first-line prompt cut at "\n")
LINE_ENDS: Final = frozenset({"newline", "blank_line", "space"})
CONTAINERS: Final = ("code_fence", "json_string", "json", "none")
# Stop strings made of what ordinary content is made of: a period, a newline, a quote, a comma. A marker the
# app chose for a delimiter ("~~~", "[[internal]]", "END", a special token) is written by the model on purpose,
# so the place it fires is the end the app asked for, inside a JSON string or not.
CONTENT_LIKE: Final = frozenset({"period", "newline", "blank_line", "quote", "space", "digit"})
SHORT_PUNCT: Final = 2

# Lower-case words that take a period without ending a sentence (English; the lone initial and the dotted
# forms "e.g", "i.e", "U.S" are found by shape, not listed).
_ABBREVIATIONS: Final = frozenset(
    "approx ca cf dept dr eg est etc fig figs ie incl jr max min misc mr mrs ms no nos op pp prof pt ref resp "
    "sec sr st vs viz vol al apt ave blvd co corp inc ltd mt jan feb mar apr jun jul aug sep sept oct nov dec "
    "mon tue wed thu fri sat sun hr hrs km kg lb lbs oz ft sq tel ext".split())
_CLOSERS: Final = frozenset("\"')]}»”’")


def stop_string_class(stop: str) -> str:
    """What a stop string is made of, without its text: newline, blank_line, period, quote, fence, space,
    punct (one or more punctuation marks), digit, word (letters), special (a ``<|...|>`` token name) or
    mixed."""
    if not stop:
        return "empty"
    if stop.startswith("<") and stop.endswith(">") and len(stop) > 2:
        return "special"
    if set(stop) <= {"\n", "\r"}:
        return "blank_line" if stop.count("\n") > 1 else "newline"
    if stop.strip() == "":
        return "space"
    core = stop.strip()
    if core == ".":
        return "period"
    if "```" in core:
        return "fence"
    if set(core) <= {'"', "'", "“", "”", "‘", "’"}:
        return "quote"
    if all(unicodedata.category(c).startswith(("P", "S")) for c in core):
        return "punct"
    if core.isdigit():
        return "digit"
    if all(c.isalpha() or c in " _-" for c in core):
        return "word"
    return "mixed"


def preceded_by(text: str) -> str:
    """The class of the characters right before the end of ``text`` (where a stop string cut it)."""
    if not text.strip():
        return "empty"
    last = text[-1]
    if last.isdigit():
        return "digit"
    if last.isspace():
        return "space"
    stripped = text.rstrip("".join(_CLOSERS))
    if stripped and stripped[-1] in ".!?…。！？":
        return "sentence_end"
    if last.isalpha():
        return "abbreviation" if _abbreviation(text) else "letter"
    if unicodedata.category(last).startswith(("P", "S")):
        return "punct"
    return "other"


def inside(text: str) -> str:
    """What the end of ``text`` is inside: code_fence, json_string, json or none."""
    if _in_code_fence(text):
        return "code_fence"
    return _json_state(text) or "none"


def content_like(stop_class: str | None, stop_chars: int | None = None) -> bool:
    """Whether a stop string of this class (and length) is made of ordinary content: None (not known) is."""
    if stop_class is None:
        return True
    return stop_class in CONTENT_LIKE or (stop_class == "punct" and (stop_chars or 0) <= SHORT_PUNCT)


def inside_content(preceded: str | None, container: str | None, stop_class: str | None = None,
                   stop_chars: int | None = None) -> bool:
    """Whether a stop string that cut the output here cut it inside the answer's own content: one made of
    ordinary content (``content_like``) that fired mid-number or after an abbreviation (a stop string other than
    white space: a newline there ends a line), or inside a code block or a JSON value. A fence stop string that ends an open code block closes it (the usual way to take only the
    code), so that one is the block's end."""
    if not content_like(stop_class, stop_chars):
        return False
    return (preceded in CUT_CLASSES and stop_class not in LINE_ENDS) or (container is not None and container != "none")


def _abbreviation(text: str) -> bool:
    """Whether the word ``text`` ends in reads as an abbreviation that a period would follow."""
    i = len(text)
    while i > 0 and (text[i - 1].isalpha() or text[i - 1] == "."):
        i -= 1
    word = text[i:]
    if not word:
        return False
    if "." in word.strip("."):  # e.g, i.e, U.S, a.m: dotted letters
        return all(len(p) <= 2 for p in word.strip(".").split("."))
    before = text[i - 1] if i > 0 else " "
    if len(word) == 1 and word.isupper() and not before.isalnum():  # a lone initial: "J" of "J. Smith"
        return True
    return word.lower() in _ABBREVIATIONS


def _in_code_fence(text: str) -> bool:
    """An odd number of ``` fences (or of ~~~ fences, markdown's other kind) opened before the cut: the cut is
    inside a code block."""
    return text.count("```") % 2 == 1 or text.count("~~~") % 2 == 1


def _json_state(text: str) -> str | None:
    """For an answer that opens as JSON (after an optional fence line): ``json_string`` when the cut is inside a
    string, ``json`` inside an unfinished value outside strings, None when the text is not JSON-shaped or its
    top value is complete."""
    body = text.lstrip()
    if body.startswith("```"):
        nl = body.find("\n")
        body = body[nl + 1:].lstrip() if nl >= 0 else ""
    if not body or body[0] not in "{[":
        return None
    depth, in_str, esc = 0, False, False
    for ch in body:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return None  # the value closed: what follows is not inside it
    if in_str:
        return "json_string"
    return "json" if depth > 0 else None


def end_kind(finish_reason: str | None, *, matched_stop_string: bool = False, matched_stop_token: bool = False,
             stop_strings_set: bool = False, said_which: bool = False, aborted: bool = False) -> str:
    """The end kind for a canonical finish reason (tracer/registry/finish_reason.py) and what is known of the
    stop: ``said_which`` when the recorder knows whether a stop string matched (the server; Anthropic's
    ``stop_reason``), so a plain "stop" with stop strings set is the end of the turn there, and unknown where
    only "stop" was said."""
    if aborted:
        return "client_disconnect"
    if finish_reason is None:
        return "other"
    if finish_reason == "length":
        return "length"
    if finish_reason == "tool_calls":
        return "tool_call"
    if finish_reason in ("content_filter", "error"):
        return finish_reason
    if finish_reason == "stop":
        if matched_stop_string:
            return "stop_string"
        if matched_stop_token:
            return "stop_token"
        if stop_strings_set and not said_which:
            return "stop_unknown"
        return "end_turn"
    return "other"


def stop_values(output: str | None, kind: str, stop: str | None, stops_set: int, *,
                token_name: str | None = None) -> dict[str, object]:
    """The ``gen.stop`` values that say how a pass ended (registry: catalog/generation.py). ``stop``: the stop
    string that matched, or for ``stop_unknown`` the one the request set when it set only one; ``token_name``:
    the end token or engine reason that ended it otherwise (``<|im_end|>``, ``constraint_complete``). Text is
    read here and never returned, except the stop string itself under full capture."""
    from llmtrace.tracer.record import capture
    from llmtrace.tracer.registry import names as N

    # every key present (None where it does not apply: the recorder drops those), so a reader of the dict sees
    # the stage's whole set of values
    values: dict[str, object] = {N.STOP_KIND: kind, N.STOP_STRINGS: stops_set, N.STOP_AT_CHAR: None,
                                 N.STOP_PRECEDED_BY: None, N.STOP_INSIDE: None, N.STOP_STRING_CLASS: None,
                                 N.STOP_STRING_CHARS: None, N.STOP_STRING_HASH: None, N.STOP_MATCHED: None}
    if output is not None:
        values[N.STOP_AT_CHAR] = len(output)
    if kind in ("stop_string", "stop_unknown") and output is not None:
        values[N.STOP_PRECEDED_BY] = preceded_by(output)
        values[N.STOP_INSIDE] = inside(output)
    if stop:
        values[N.STOP_STRING_CLASS] = stop_string_class(stop)
        values[N.STOP_STRING_CHARS] = len(stop)
        if capture.mode() != "none":
            values[N.STOP_STRING_HASH] = capture.hash_text(stop)
        if kind == "stop_string" and capture.mode() == "full":
            values[N.STOP_MATCHED] = stop
    elif token_name is not None:
        values[N.STOP_MATCHED] = token_name  # an end token's name or the engine's reason: no app text
    return values
