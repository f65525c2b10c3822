"""Conversations seen from the wire: which calls belong together, and what their history shows.

A call's session comes from, in order: ``llmtrace.session(id, user=...)`` around the call; the request's
own fields (OpenAI ``metadata.session_id`` / ``conversation_id`` / ``thread_id``, Responses
``conversation`` and ``previous_response_id``); otherwise it is *inferred* from the prefix chain of the
messages array: a request whose messages extend an earlier request's messages continues that
conversation. Users come from the context manager, OpenAI ``user`` / ``safety_identifier`` /
``metadata.user_id`` and Anthropic ``metadata.user_id``; ids read off the wire are stored as keyed
hashes unless capture is ``full`` (they are often e-mail addresses).

The same messages array also shows what only app-side helpers recorded before: tool results answering
the previous call's tool calls (a tool round trip, which joins the previous call's trace instead of
starting a new one), tool calls repeated with the same arguments (``loop.budget``), and a history that no
longer extends the previous request of its conversation (``loop.compaction``).

All of it is kept in process memory as hashes and counts (bounded, oldest forgotten first).
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan

from llmtrace.tracer import capture
from llmtrace.tracer.reading import facts as fact_reading
from llmtrace.tracer.reading import tool_digest
from llmtrace.tracer.reading.messages import Message, read_messages, turns, wire_ids
from llmtrace.tracer.registry import names as N

_MAX_CONVERSATIONS = 4096
_SHRUNK = 0.8  # a rewritten history at most this share of the previous request's text is a compaction
_explicit: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "llmtrace_session", default=None
)


@contextmanager
def session(session_id: str, user: str | None = None) -> Iterator[None]:
    """Group every instrumented call inside the block under ``session_id`` (and ``user``)."""
    token = _explicit.set((str(session_id), None if user is None else str(user)))
    try:
        yield
    finally:
        _explicit.reset(token)


@dataclass(slots=True)
class Conversation:
    session_id: str
    user_id: str | None
    inferred: bool
    root: Any = None  # the pass span that began the current turn (tool round trips join its trace)
    last_end_ns: int = 0
    chain: list[bytes] = field(default_factory=list)  # message digests of its last request
    prompt_chars: int = 0
    anchor: bytes | None = None
    last_response_id: str | None = None
    facts: fact_reading.FactMemo | None = None  # its last request's facts (fact digest -> label), per text
    text_chars: int = 0  # characters of its last request's texts (system and messages)
    texts: list[tuple[bytes, int, bool]] = field(default_factory=list)  # its last request's (digest, chars, system)
    system: tuple[int, bytes] = (0, b"")  # its last request's system text: (chars, digest)
    turns: list[bytes] = field(default_factory=list)  # its last request's turns (after the system), unchained


@dataclass(slots=True)
class View:
    """What one request showed about its conversation; filled at request time, finished at the end."""

    session_id: str | None = None
    user_id: str | None = None
    inferred: bool = False
    conversation: Conversation | None = None
    parent: Any = None  # a pass span to join (tool round trip), else None
    tool_results: list[tuple[str, str, int]] = field(default_factory=list)  # (name, call id, chars)
    tool_call_steps: int = 0
    tool_calls: int = 0
    repeated_tool_calls: int = 0  # by the same arguments or the same result (tool_digest.count_repeats)
    repeated_tool_results: int = 0  # by the same result or error after the model saw it
    rewritten: bool = False
    kept_messages: int = 0
    turns_replaced: int = 0
    prompt_chars_before: int = 0
    chain: list[bytes] = field(default_factory=list)
    anchor: bytes | None = None
    since_ns: int = 0
    facts: fact_reading.FactMemo | None = None  # this request's facts (fact_reading.wire_facts), None: not read
    text_chars: int = 0
    texts: list[tuple[bytes, int, bool]] = field(default_factory=list)  # per text read: (digest, chars, system)
    facts_lost: list[str] = field(default_factory=list)  # labels of facts the rewrite dropped
    opening: bytes | None = None  # the first user message on its own (not chained to the system prompt)
    system: tuple[int, bytes] = (0, b"")  # the system text: (chars, digest)
    turns: list[bytes] = field(default_factory=list)  # the turns after the system messages, unchained digests
    window_dropped: int = 0  # turns dropped from the front of a history otherwise sent as before (a window)

    def attributes(self) -> dict[str, object]:
        """Pass-span attributes (OpenTelemetry ``session.id`` / ``user.id``)."""
        return {N.SESSION_ID: self.session_id, N.USER_ID: self.user_id, N.SESSION_INFERRED: self.inferred}


def compaction_values(view: View, prompt_chars: int) -> dict[str, object]:
    """The ``loop.compaction`` values of a request whose history ``view`` found rewritten, seen on the wire
    (the middleware's own calls and the collector's foreign spans alike)."""
    from llmtrace.tracer.reading.tokens import approx_tokens

    return {N.COMPACTION_HISTORY_REWRITTEN: True,
            N.COMPACTION_TOKENS_BEFORE: approx_tokens(view.prompt_chars_before),
            N.COMPACTION_TOKENS_AFTER: approx_tokens(prompt_chars),
            N.COMPACTION_TURNS_SUMMARIZED: view.turns_replaced,
            N.COMPACTION_KEPT_MESSAGES: view.kept_messages,
            N.COMPACTION_FACTS_LOST: view.facts_lost,
            N.COMPACTION_FACTS_LOST_COUNT: len(view.facts_lost),
            N.COMPACTION_METHOD: "window" if view.window_dropped else "summary",
            N.COMPACTION_OBSERVED: "wire"}


class Anchor:
    """What a later call needs of a finished pass to join its trace: its span context, not the span (whose
    attributes a long-lived conversation table would otherwise keep alive)."""

    __slots__ = ("context",)

    def __init__(self, pass_span: Any) -> None:
        self.context = trace.set_span_in_context(NonRecordingSpan(pass_span.otel_span.get_span_context()))


def _dropped(prev: list[bytes], turns: list[bytes]) -> int:
    """How many turns from the front of ``prev`` (a request's turns) ``turns`` dropped while sending the rest as
    they were, then new ones: the last turns of ``prev`` (two at least, its last message among them) open
    ``turns``. 0: not such a window."""
    for overlap in range(min(len(prev) - 1, len(turns) - 1), 1, -1):
        if turns[overlap - 1] == prev[-1] and prev[len(prev) - overlap:] == turns[:overlap]:
            return len(prev) - overlap
    return 0


def _facts_lost(conv: Conversation, view: View) -> list[str]:
    """Labels of the names and numbers the conversation's last request carried and this one does not."""
    before = conv.facts.labels if conv.facts is not None else {}
    now = view.facts.labels if view.facts is not None else {}
    return sorted(label for h, label in before.items() if h not in now)[:200]


def _shrunk(conv: Conversation, view: View) -> bool:
    """Whether the rewritten request's text shrank against its conversation's last request.

    The whole texts are compared, and also what changed alone: the texts after the leading ones both
    requests share, system prompts left out. A long system prompt and a kept opening are in both requests
    unchanged; counted in, they hide a summary that replaced the turns after them (a 700-character system
    prompt over 130 characters of turns reads 0.9 however short the summary), and a summary moved into the
    system prompt would count as kept text."""
    if view.text_chars < _SHRUNK * conv.text_chars:
        return True
    same = 0
    for a, b in zip(conv.texts, view.texts):
        if a[0] != b[0]:
            break
        same += 1
    before = sum(chars for _, chars, system in conv.texts[same:] if not system)
    after = sum(chars for _, chars, system in view.texts[same:] if not system)
    return after < _SHRUNK * before


def _system_grew(before: tuple[int, bytes], system: str) -> bool:
    """Whether ``system`` is the earlier system text (``before``: its chars and digest) with something put
    before or after it: a summary folded into the system prompt keeps the instructions it was added to."""
    n, digest = before
    return 0 < n < len(system) and digest in (fact_reading.text_digest(system[:n]), fact_reading.text_digest(system[-n:]))


def _opens_anew(last: list[bytes], msgs: list[Message]) -> bool:
    """Whether a request that shares only its opening with a conversation's last request (``last``, its
    chained digests) begins a conversation of its own rather than rewriting that one's history.

    Few-shot examples sent as user and assistant turns, or a scripted greeting exchange, open every
    conversation alike; a new conversation's first request is that opening and then the user's own
    question: at most one message after the shared ones, following an assistant turn. A compaction puts
    something in place of the turns it drops (a summary, then the question: two messages or more), or
    folds the summary into the turn after a kept user message."""
    kept = 0
    for digest, m in zip(last, msgs):
        if digest != m.digest:
            break
        kept += 1
    new = len(msgs) - kept
    return new == 0 or (new == 1 and kept > 0 and msgs[kept - 1].role == "assistant")


def _private(user: str) -> str:
    """A user id read off the wire: kept as is only when the store keeps text."""
    return user if capture.mode() == "full" else capture.hash_text(f"user:{user}")


def _count_tool_calls(view: View, msgs: list[Message]) -> None:
    steps = [m.tool_calls for m in msgs if m.tool_calls]
    view.tool_call_steps = len(steps)
    view.tool_calls = sum(len(s) for s in steps)
    repeats = tool_digest.count_repeats(steps, {cid: key for m in msgs for cid, _, key in m.tool_results})
    view.repeated_tool_calls, view.repeated_tool_results = repeats.calls, repeats.results


def _continued(view: View, conv: Conversation, msgs: list[Message], server_side: bool) -> None:
    """What this request of a known conversation shows against its last: a rewritten history (and what it
    lost), or the turns it added (a tool round trip joins the last call's trace)."""
    n_prev = len(conv.chain)
    if server_side:
        extension = msgs
    elif n_prev == 0 or (len(msgs) >= n_prev and msgs[n_prev - 1].digest == conv.chain[-1]):
        extension = msgs[n_prev:]
    else:
        kept = 0
        for a, b in zip(conv.chain, view.chain):
            if a != b:
                break
            kept += 1
        view.rewritten, view.kept_messages = True, kept
        view.turns_replaced = n_prev - kept
        view.prompt_chars_before = conv.prompt_chars
        if not view.window_dropped and conv.system == view.system:
            view.window_dropped = _dropped(conv.turns, view.turns)  # a named session's window
        if view.window_dropped:
            # The oldest turns dropped and the rest sent as they were: nothing stands in for the dropped
            # turns, so whatever they alone said is gone, however long the history stays.
            view.turns_replaced = view.window_dropped
            view.facts_lost = _facts_lost(conv, view)
            return
        # Names and numbers the previous request carried and this one does not: what the rewrite lost.
        # Only a rewrite that replaced several turns and shrank the context is a compaction: the same
        # opening with another last question (or one edited turn) drops nothing the model needed.
        if view.turns_replaced >= 2 and _shrunk(conv, view):
            view.facts_lost = _facts_lost(conv, view)
        return
    calls = {cid: name for m in msgs for cid, name, _ in m.tool_calls}
    for m in extension:
        for cid, chars, _ in m.tool_results:
            view.tool_results.append((calls.get(cid, "unknown"), cid, chars))
    if view.tool_results and not any(m.role == "user" and not m.tool_results for m in extension):
        view.parent = conv.root  # a tool round trip: the same agent turn, the same trace
        view.since_ns = conv.last_end_ns


class Tracker:
    def __init__(self, max_conversations: int = _MAX_CONVERSATIONS) -> None:
        self._lock = threading.Lock()
        self._by_digest: OrderedDict[bytes, Conversation] = OrderedDict()
        self._by_session: OrderedDict[str, Conversation] = OrderedDict()
        self._by_anchor: OrderedDict[bytes, Conversation] = OrderedDict()
        self._by_response: OrderedDict[str, Conversation] = OrderedDict()
        self._by_opening: OrderedDict[bytes, Conversation] = OrderedDict()
        self._by_last_turn: OrderedDict[tuple[bytes, bytes], Conversation] = OrderedDict()
        self._max = max_conversations

    def clear(self) -> None:
        with self._lock:
            for d in (self._by_digest, self._by_session, self._by_anchor, self._by_response, self._by_opening,
                      self._by_last_turn):
                d.clear()

    def _put(self, table: OrderedDict[Any, Conversation], key: Any, conv: Conversation) -> None:
        table[key] = conv
        table.move_to_end(key)
        while len(table) > self._max:
            table.popitem(last=False)

    @staticmethod
    def _opening(view: View, said: list[tuple[str, str]]) -> list[bytes]:
        """Each text's digest; with them the view's opening user turn and its system text (chars, digest),
        which, unlike the anchor, are not chained to the system prompt (a fold keeps them)."""
        digests = [fact_reading.text_digest(t) for _, t in said]
        view.opening = next((d for d, (kind, _) in zip(digests, said) if kind in ("user", "history:user")), None)
        systems = [(d, t) for d, (kind, t) in zip(digests, said) if kind == "system"]
        if len(systems) == 1:
            view.system = (len(systems[0][1]), systems[0][0])
        elif systems:
            joined = "\n".join(t for _, t in systems)
            view.system = (len(joined), fact_reading.text_digest(joined))
        return digests

    def _window_of(self, view: View) -> tuple[Conversation | None, int]:
        """The conversation whose last request this one continues after dropping its oldest turns (an app
        that sends the last N messages), and how many it dropped; lock held.

        Its last message (the question it asked) must sit inside this request, with every turn before it here
        being the last turns of that request, in order, two at least; the system text the same."""
        turns = view.turns
        for t in range(len(turns) - 2, 0, -1):
            conv = self._by_last_turn.get((view.system[1], turns[t]))
            if conv is None or not conv.inferred or conv.system != view.system:
                continue
            dropped = _dropped(conv.turns, turns)
            if dropped:
                return conv, dropped
        return None, 0

    def begin(self, body: Mapping[str, object], segments: list[tuple[str, str]]) -> View:
        """What ``body`` shows about its conversation; ``segments`` are the prompt segments the protocol
        parser read off the same body (their texts are what the facts come from: read once, not again)."""
        msgs = read_messages(body)
        view = View(chain=[m.digest for m in msgs], turns=turns(msgs))
        first_user = next((i for i, m in enumerate(msgs) if m.role == "user"), None)
        view.anchor = msgs[first_user].digest if first_user is not None else None
        # The system prompt and the turns, as the model sees them (the tools are not said in turns).
        said = [(kind, text) for kind, text in segments if kind != "tools"]
        digests: list[bytes] | None = None  # each text hashed once: the fact memo keys on them too
        # an answer in the history, or the app's own note after the first turn (a summary sent as a developer or
        # system message in place of the turns it replaced): more than one exchange
        multi_turn = any(m.role == "assistant" for m in msgs) or first_user is not None and any(
            m.role in ("system", "developer") for m in msgs[first_user + 1:])
        if multi_turn or len(msgs) > 2:  # read below in any case: hashed before the lookup, which needs two
            digests = self._opening(view, said)
        _count_tool_calls(view, msgs)
        explicit = _explicit.get()
        wire_sid, wire_user = wire_ids(body)
        sid = explicit[0] if explicit else wire_sid
        conv, server_side = self._find(view, msgs, said, sid, body.get("previous_response_id"), multi_turn)
        # Read after the lookup: a request of a known conversation is read even when it is short (an app
        # may compact to [system + summary, question]: unread, every earlier fact would count as lost).
        if conv is not None or multi_turn or len(msgs) > 2:  # not a one-shot
            texts = [text for _, text in said]
            if digests is None:
                digests = self._opening(view, said)
            # Only the turns the conversation's last request lacked are read again (fact_reading.FactMemo).
            view.facts = fact_reading.wire_facts_since(texts, conv.facts if conv is not None else None, digests=digests)
            view.text_chars = sum(len(t) for t in texts)
            view.texts = [(d, len(t), kind == "system") for d, (kind, t) in zip(digests, said, strict=True)]
        user = explicit[1] if explicit and explicit[1] else (_private(wire_user) if wire_user else None)
        if conv is None:
            view.session_id = sid or uuid.uuid4().hex
            view.inferred = sid is None
            view.user_id = user
            return view
        view.conversation = conv
        view.session_id, view.inferred = (sid, False) if sid else (conv.session_id, conv.inferred)
        view.user_id = user or conv.user_id
        _continued(view, conv, msgs, server_side)
        return view

    def _find(self, view: View, msgs: list[Message], said: list[tuple[str, str]], sid: str | None,
              prev_id: object, multi_turn: bool) -> tuple[Conversation | None, bool]:
        """The conversation this request continues, and whether its history lives with the provider."""
        with self._lock:
            conv: Conversation | None = None
            for m in reversed(msgs[:-1]):  # the longest earlier request this one extends (a repeat does not)
                conv = self._by_digest.get(m.digest)
                if conv is not None:
                    break
            server_side = False  # Responses: the history lives with the provider, named by id
            if conv is None and isinstance(prev_id, str):
                conv = self._by_response.get(prev_id)
                server_side = conv is not None
            if sid is not None and (conv is None or conv.session_id != sid):
                conv, server_side = self._by_session.get(sid), False
            if conv is None and sid is None and view.anchor is not None and multi_turn:
                conv = self._by_anchor.get(view.anchor)  # the same opening, its history since rewritten
                if conv is not None and (not conv.inferred or _opens_anew(conv.chain, msgs)):
                    conv = None  # a named session is only continued by calls that name it
            if conv is None and sid is None and view.opening is not None and multi_turn:
                # The same opening under a system prompt that grew around the earlier one: a compaction that
                # folded its summary into the system prompt (which changes every chained digest, the anchor's too)
                conv = self._by_opening.get(view.opening)
                system = "\n".join(text for kind, text in said if kind == "system")
                if conv is not None and (not conv.inferred or not _system_grew(conv.system, system)):
                    conv = None
            if conv is None and sid is None and multi_turn:
                conv, view.window_dropped = self._window_of(view)
        return conv, server_side

    def end(self, view: View, pass_span: Any, response_id: str | None, end_ns: int, prompt_chars: int) -> None:
        """Remember this request as the latest of its conversation."""
        if view.session_id is None:
            return
        conv = view.conversation
        with self._lock:
            if conv is None or conv.session_id != view.session_id:
                conv = Conversation(view.session_id, view.user_id, view.inferred)
            # (no pass span: a request read by the collector, whose tool round trips join nothing)
            conv.root = view.parent if view.parent is not None else (Anchor(pass_span) if pass_span is not None else None)
            conv.last_end_ns = end_ns
            conv.chain = view.chain
            conv.prompt_chars = prompt_chars
            conv.facts = view.facts
            conv.text_chars = view.text_chars
            conv.texts = view.texts
            conv.system = view.system
            conv.turns = view.turns
            conv.user_id = view.user_id or conv.user_id
            if view.chain:
                self._put(self._by_digest, view.chain[-1], conv)
            if view.anchor is not None:
                self._put(self._by_anchor, view.anchor, conv)
            if view.opening is not None and view.inferred:
                self._put(self._by_opening, view.opening, conv)
            if len(view.turns) >= 2 and view.inferred:
                self._put(self._by_last_turn, (view.system[1], view.turns[-1]), conv)
            if not view.inferred:
                self._put(self._by_session, view.session_id, conv)
            if response_id:
                conv.last_response_id = response_id
                self._put(self._by_response, response_id, conv)

