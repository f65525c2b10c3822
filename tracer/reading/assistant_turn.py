"""One assistant turn as one canonical text: what the middleware hashes as the answer (``llmtrace.output.hash``)
and what it hashes as that turn's prompt segment when the app writes the answer back into a later prompt,
so "a later prompt carries this answer" is one hash lookup, for every shape an SDK returns and an app sends
back (plain text, OpenAI ``tool_calls``, Responses ``function_call`` items, Anthropic ``tool_use`` blocks).

The turn's hash goes on its segment's record as ``turn`` (prompt_segments.py); the segment's own hash stays
over the text as the model sees it again, call ids included, so the cache analysis reads prompts as before.

The form: the turn's text parts joined by newlines; then, when it called tools, the calls as canonical JSON,
``[{"arguments": ..., "name": ...}]``, with the arguments as text: OpenAI's argument string as it came (a
cut call's partial JSON included), an Anthropic input object as canonical JSON. A turn of text alone is its
text, as it always was. Call ids are left out: they are new on every call (two identical answers would
hash apart) and the tool results that name them are hashed without them too.

Anthropic streams a tool's input as partial JSON; the SDK's accumulator (``get_final_message``) parses it
with jiter's partial mode, and that object is what the app sends back, so a streamed input is read the
same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from llmtrace.tracer.reading.segments import canonical, part_text


def text(texts: Sequence[str], calls: Sequence[tuple[str, str]]) -> str:
    """The canonical turn from its text parts and its (name, arguments text) calls, in order."""
    body = "\n".join(texts)
    if not calls:
        return body
    return body + canonical([{"name": name, "arguments": args} for name, args in calls])


def arguments(value: object) -> str:
    """A call's arguments as text: a string as it is (OpenAI's JSON text), anything else (an Anthropic input
    object) as canonical JSON."""
    return value if isinstance(value, str) else canonical(value)


def streamed_input(raw: str, start: object) -> str:
    """An Anthropic tool input streamed as partial JSON, as the SDK's accumulator has it: the block's start
    input when no piece came, the whole JSON parsed, or (cut) what jiter's partial mode makes of it."""
    if not raw:
        return arguments({} if start is None else start)
    try:
        return canonical(json.loads(raw))
    except ValueError:
        pass
    try:
        from jiter import from_json  # the SDKs' own parser; installed with either SDK
    except ImportError:
        return raw
    try:
        return canonical(from_json(raw.encode(), partial_mode=True))
    except ValueError:
        return raw


def tool_call(tc: Mapping[str, object]) -> tuple[str, str]:
    """(name, arguments) of a chat-completions tool call: a function call, or a custom tool's input."""
    fn = tc.get("function") if isinstance(tc.get("function"), Mapping) else tc.get("custom")
    if not isinstance(fn, Mapping):
        return "", arguments(tc)
    return str(fn.get("name") or ""), arguments(fn.get("arguments", fn.get("input", "")))


def chat_message(m: Mapping[str, object]) -> str:
    """A chat-completions message as the model sees it again: its content, and an assistant's tool calls."""
    calls = m.get("tool_calls")
    body = part_text(m.get("content"))
    if not calls:
        return body
    listed = calls if isinstance(calls, list) else [calls]
    return text([body], [tool_call(tc) if isinstance(tc, Mapping) else ("", arguments(tc)) for tc in listed])


def anthropic_content(content: object) -> str:
    """An Anthropic message's content: its text parts (tool results and other blocks as ``part_text`` reads
    them), then its ``tool_use`` blocks as calls."""
    if not isinstance(content, list):
        return part_text(content)
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "tool_use":
            calls.append((str(part.get("name") or ""), arguments(part.get("input"))))
        else:
            texts.append(part_text([part]))
    return text(texts, calls)


# Only the latest assistant turns of a prompt are marked: an answer an app goes on with is written back into
# its next prompt, as its newest turn (several, after parallel calls); each turn costs a scrub and a keyed hash
# on every request, so a 90-message history marked whole doubled the middleware's work per call.
RECENT_TURNS = 4


def of_messages(messages: Sequence[object], turn_of: Callable[[Mapping[str, object]], str | None],
                offset: int = 0, last: int = RECENT_TURNS) -> dict[int, str]:
    """The canonical turns of a message list by segment index (``offset`` + the index among its mapping
    turns, as ``turn_segments`` numbers them), the ``last`` newest only: ``turn_of`` gives a message's turn,
    None for no turn."""
    turns = [m for m in messages if isinstance(m, Mapping)]
    out: dict[int, str] = {}
    for k in range(len(turns) - 1, -1, -1):
        if len(out) >= last:
            break
        turn = turn_of(turns[k])
        if turn is not None:
            out[offset + k] = turn
    return out


def chat_turn(m: Mapping[str, object]) -> str | None:
    """A chat-completions assistant message's turn (None for any other role)."""
    return chat_message(m) if m.get("role") == "assistant" else None


def anthropic_turn(m: Mapping[str, object]) -> str | None:
    """An Anthropic assistant message's turn (None for any other role)."""
    return anthropic_content(m.get("content")) if m.get("role") == "assistant" else None


def of_items(items: Sequence[object], content_text: Callable[[object], str], offset: int = 0) -> dict[int, str]:
    """Responses API input items: each run of one assistant turn's items (its message, its function calls,
    as the app writes ``response.output`` back) is one turn, put on the run's first item's segment; the
    ``RECENT_TURNS`` newest only."""
    out: dict[int, str] = {}
    run: list[Mapping[str, object]] = []
    at = k = offset
    for item in [*items, None]:
        if isinstance(item, Mapping) and (item.get("type") == "function_call" or (
                item.get("role") == "assistant" and item.get("type", "message") == "message")):
            if not run:
                at = k
            run.append(item)
        elif run:
            out[at] = responses_items(run, content_text)
            run = []
        if isinstance(item, Mapping):
            k += 1
    return dict(sorted(out.items())[-RECENT_TURNS:])


def responses_items(items: Sequence[Mapping[str, object]], content_text: Callable[[object], str]) -> str:
    """Consecutive Responses API items of one assistant turn (messages, ``function_call`` items) as one turn;
    ``content_text`` reads a message item's content."""
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    for item in items:
        if item.get("type") == "function_call":
            calls.append((str(item.get("name") or ""), arguments(item.get("arguments", ""))))
        else:
            texts.append(content_text(item.get("content")))
    return text(texts, calls)


@dataclass(slots=True)
class _Call:
    name: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    start: object = None  # an Anthropic block's input at its start
    streamed: bool = False  # arguments arrive as partial JSON of an input object (Anthropic)

    def arguments(self) -> str:
        raw = "".join(self.args)
        return streamed_input(raw, self.start) if self.streamed else raw


@dataclass(slots=True)
class Turn:
    """An answer's text blocks and tool calls as they arrive, by block key in order of first sight."""

    texts: dict[Hashable, list[str]] = field(default_factory=dict)
    calls: dict[Hashable, _Call] = field(default_factory=dict)

    def add_text(self, key: Hashable, piece: str) -> None:
        self.texts.setdefault(key, []).append(piece)

    def add_call(self, key: Hashable, name: object = None, args: object = None, *, start: object = None,
                 streamed: bool = False) -> None:
        """A call, or a piece of one (its name and argument text, when they are text)."""
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = _Call(start=start, streamed=streamed)
        if isinstance(name, str):
            call.name.append(name)
        if isinstance(args, str):
            call.args.append(args)
        elif args is not None:
            call.args.append(arguments(args))

    def words(self) -> str:
        """The answer's text parts alone, without its calls."""
        return "\n".join("".join(p) for p in self.texts.values())

    def text(self) -> str:
        return text(["".join(p) for p in self.texts.values()],
                    [("".join(c.name), c.arguments()) for c in self.calls.values()])
