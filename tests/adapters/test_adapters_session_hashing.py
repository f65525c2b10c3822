"""The conversation tracker hashes each message of a request once and each of its texts once.

Every request carries the whole history, so what the tracker does per message is paid again on every call
of a long conversation. Before: each message was hashed twice (its own digest, then the chain's), each tool
call's arguments once more, and each text twice (the fact memo's key, then the tracker's own): 12.6k
hashes over the 100 calls of the `adapters` benchmark's conversation. (The chain links each message's own
16-byte digest; those links, 16 bytes each, are not counted.) Real OpenAI SDK, instrumented, against
the loopback fake provider; the hashes are counted where the tracker and the fact memo make them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider

from llmtrace.adapters import instrument
from llmtrace.adapters.middleware.openai_parser import OpenAIParser
from llmtrace.tracer.reading import facts as compaction
from llmtrace.tracer.reading import messages


def _requests() -> list[list[dict[str, Any]]]:
    """Six requests of one agent conversation: a question, a tool call, its result, the answer, again."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You dispatch trucks for Osterby Haulage."}]
    out = []
    for i in range(3):
        msgs.append({"role": "user", "content": f"Can truck KF-{2200 + i} take booking BK-{8800 + i}?"})
        out.append(list(msgs))
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "lookup_booking", "arguments": json.dumps({"booking": f"BK-{8800 + i}"})}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"BK-{8800 + i}: gate North {i}"})
        out.append(list(msgs))
        msgs.append({"role": "assistant", "content": f"BK-{8800 + i} is confirmed at gate North {i}."})
    return out


def test_each_message_and_text_is_hashed_once_per_request(traced: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        if not (len(args[0] if args else kwargs.get("data", b"")) == 16 and "key" in kwargs):
            made.append(1)  # (a chain link, a message's 16-byte digest keyed by the one before, reads no text)
        return hashlib.blake2b(*args, **kwargs)

    spy = SimpleNamespace(blake2b=counting)
    monkeypatch.setattr(messages, "hashlib", spy)
    monkeypatch.setattr(compaction, "hashlib", spy)
    with fake_provider() as provider:
        provider.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
        per_call = []
        for msgs in _requests():
            before = len(made)
            client.chat.completions.create(model="gpt-4o-mini", messages=msgs, max_tokens=1)
            per_call.append(len(made) - before)
        bodies = [json.loads(body) for _, _, body in provider.requests]
    expected = []
    for body in bodies:
        parser = OpenAIParser()
        parser.on_request(body)
        texts = [t for kind, t in parser.obs.segments if kind != "tools"]
        read = len(body["messages"]) > 2  # a one-shot request (system + question) is not read for facts
        expected.append(len(body["messages"]) + (len(texts) if read else 0))
    assert per_call == expected
    assert sum(expected) > 2 * len(bodies)  # the requests were read: the count is not vacuous
