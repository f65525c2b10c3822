"""A request's messages as the conversation tracker reads them (sessions.py): each message's chained digest
(covering it and every message before it) and its own, the tool calls it asks for and the results it
answers, and the session and user the request names itself. Digests only; no text is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orjson import OPT_SORT_KEYS, dumps

from llmtrace.tracer.reading import tool_digest


@dataclass(slots=True)
class Message:
    role: str
    digest: bytes  # chained: covers this message and every one before it
    plain: bytes  # this message alone (a history that dropped its oldest turns still holds it)
    tool_calls: list[tuple[str, str, str]]  # (call id, name, arguments' key: _args_key) asked for in this message
    # (call id, result chars, result key: tool_digest.result_key, read with the call's arguments) answered here
    tool_results: list[tuple[str, int, str]]


def _canonical(value: object) -> bytes:
    try:
        return dumps(value, option=OPT_SORT_KEYS)
    except TypeError:
        return str(value).encode("utf-8", "surrogatepass")


def _args_key(arguments: object) -> str:
    """What tells two calls' arguments apart: their loose form (tracer/reading/tool_digest.py: keys sorted, each
    string reduced to its case-folded words), so a call re-sent with its keys in another order, other spacing or
    its id in other case is the same call, as on the tool spans; OpenAI's JSON text and Anthropic's parsed
    ``input`` alike."""
    return tool_digest.loose_key(arguments)


def _chained(parent: bytes, value: object) -> bytes:
    """The chain's next digest: ``value`` hashed once, keyed by the digest before it (``b""`` first)."""
    return hashlib.blake2b(_canonical(value), digest_size=16, key=parent).digest()


def turns(msgs: list[Message]) -> list[bytes]:
    """The unchained digests of the messages after the leading system (or developer) ones."""
    start = 0
    while start < len(msgs) and msgs[start].role in ("system", "developer"):
        start += 1
    return [m.plain for m in msgs[start:]]


def _messages(body: Mapping[str, object]) -> list[Mapping[str, Any]]:
    msgs = body.get("messages")
    if isinstance(msgs, list):
        return [m for m in msgs if isinstance(m, Mapping)]
    items = body.get("input")  # Responses API
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if isinstance(items, list):
        return [m for m in items if isinstance(m, Mapping)]
    return []


_Call = tuple[str, str, object]  # (call id, name, arguments as sent)
_Result = tuple[str, object, bool]  # (call id, content, flagged an error by the API: Anthropic's is_error)


def _tools_of(m: Mapping[str, Any]) -> tuple[list[_Call], list[_Result]]:
    calls: list[_Call] = []
    results: list[_Result] = []
    if m.get("role") == "tool":  # OpenAI chat: one tool result per message
        results.append((str(m.get("tool_call_id", "")), m.get("content", ""), False))
    kind = m.get("type")
    if kind == "function_call":  # Responses API items
        calls.append((str(m.get("call_id", "")), str(m.get("name", "")), m.get("arguments")))
    elif kind == "function_call_output":
        results.append((str(m.get("call_id", "")), m.get("output", ""), False))
    for tc in m.get("tool_calls") or ():
        fn = tc.get("function") if isinstance(tc, Mapping) else None
        if isinstance(fn, Mapping):
            calls.append((str(tc.get("id", "")), str(fn.get("name", "")), fn.get("arguments")))
    content = m.get("content")
    if isinstance(content, list):  # Anthropic blocks
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "tool_use":
                calls.append((str(part.get("id", "")), str(part.get("name", "")), part.get("input")))
            elif part.get("type") == "tool_result":
                results.append((str(part.get("tool_use_id", "")), part.get("content", ""),
                                part.get("is_error") is True))
    return calls, results


def _result_content(content: object) -> object:
    """A tool result's content as the tool gave it: Anthropic's list of text blocks is its text."""
    if isinstance(content, list) and all(isinstance(b, Mapping) and b.get("type") == "text" for b in content):
        return "".join(str(b.get("text", "")) for b in content)
    return content


def read_messages(body: Mapping[str, object]) -> list[Message]:
    """Each message with its chained digest and the tool calls and results it carries."""
    out: list[Message] = []
    parent = b""
    asked: dict[str, object] = {}  # call id -> its arguments: an error result is read without them
    for key in ("system", "instructions"):  # Anthropic system / Responses instructions lead the chain
        if body.get(key):
            parent = _chained(parent, body[key])
    for m in _messages(body):
        # the message is read once, into a digest of its own; the chain links those 16-byte digests
        plain = hashlib.blake2b(_canonical(m), digest_size=16).digest()
        parent = hashlib.blake2b(plain, digest_size=16, key=parent).digest()
        calls, results = _tools_of(m)
        for cid, _, args in calls:
            asked[cid] = args
        out.append(Message(
            str(m.get("role") or m.get("type") or "item"), parent, plain,
            [(cid, name, _args_key(args)) for cid, name, args in calls],
            [(cid, len(str(content)), tool_digest.result_key(_result_content(content), None, asked.get(cid),
                                                              is_error=flagged))
             for cid, content, flagged in results]))
    return out


def wire_ids(body: Mapping[str, object]) -> tuple[str | None, str | None]:
    """(session, user) named by the request itself."""
    meta = body.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    sid = next((str(meta[k]) for k in ("session_id", "conversation_id", "thread_id") if meta.get(k)), None)
    conv = body.get("conversation")
    if sid is None and conv:
        sid = str(conv.get("id")) if isinstance(conv, Mapping) else str(conv)
    user = meta.get("user_id") or body.get("safety_identifier") or body.get("user")
    return sid, None if not user else str(user)
