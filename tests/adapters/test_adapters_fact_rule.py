"""Which numbers count as facts a summary lost: a unit or two digits or more, never a lone digit.

``llmtrace demo`` listed "0" (a tool result's ``"eta_days": 0``) among the facts its compaction lost.
Both faces are checked: the app's own ``compact`` helper, and a compaction read off the wire (real OpenAI
SDK, instrumented, against the loopback fake provider), each through the stage span the store keeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

from llmtrace.adapters import instrument
from llmtrace.adapters.helpers import compaction

TOOL_RESULT = json.dumps(
    {"order_id": "48213", "status": "delivered", "eta_days": 0, "since": "2021", "step": 3, "refund": "$5",
     "discount": "7%", "weight_kg": 2.5}
)
LOST_FACTS = {"48213", "2021", "$5", "7%", "2.5"}
NOT_FACTS = {"0", "3"}


def _compactions(db: Path) -> list[dict[str, Any]]:
    return [r["attributes"] for r in rows(db, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]


def test_compact_loses_numbers_with_a_unit_or_digits_not_lone_digits(traced: Path) -> None:
    msgs = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is my order? I am on step 3 of the return form."},
        {"role": "assistant", "content": f"The order record: {TOOL_RESULT}. Anything else I can check for you?"},
        {"role": "user", "content": "No, thanks."},
    ]
    r = compaction.compact(msgs, lambda turns: "The user asked about an order.", trigger_tokens=20, keep_last=1)
    assert r.compacted
    assert LOST_FACTS <= set(r.facts_lost)
    assert not NOT_FACTS & set(r.facts_lost), r.facts_lost
    (values,) = _compactions(traced)
    assert values["llmtrace.compaction.facts_lost_count"] == len(r.facts_lost)
    stored = set(values["llmtrace.compaction.facts_lost"])
    assert set(compaction.stored_labels(sorted(LOST_FACTS))) <= stored
    assert not set(compaction.stored_labels(sorted(NOT_FACTS))) & stored


def _compact_on_the_wire(client: Any) -> None:
    """A conversation with a tool result, then the app's own rewrite of it to a short summary."""
    system = {"role": "system", "content": "You are the support agent of Acme Home."}
    opening = {"role": "user", "content": "Hi, my blender arrived with a cracked jug. When does a new one come?"}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_order_status", "arguments": "{}"}}
    history = [
        system,
        opening,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT * 2},
        {"role": "assistant", "content": "Your order was delivered; a replacement ships within days."},
        {"role": "user", "content": "Thanks. And how long is the refund window on it?"},
    ]
    client.chat.completions.create(model="gpt-4o-mini", messages=history, max_tokens=1)
    summary = {"role": "user", "content": "Summary: the customer asked about a cracked jug."}
    # an answer in the rewritten request: a conversation known only by its opening continues (sessions.py)
    rewritten = [system, opening, summary, {"role": "assistant", "content": "Noted."},
                 {"role": "user", "content": "Which order was this again?"}]
    client.chat.completions.create(model="gpt-4o-mini", messages=rewritten, max_tokens=1)


def test_wire_compaction_does_not_list_a_lone_digit_as_lost(traced: Path) -> None:
    with fake_provider() as provider:
        provider.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        _compact_on_the_wire(
            instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
        )
    wire = [c for c in _compactions(traced) if c.get("llmtrace.compaction.history_rewritten")]
    assert len(wire) == 1
    lost = set(wire[0]["llmtrace.compaction.facts_lost"])
    assert set(compaction.stored_labels(sorted(LOST_FACTS))) <= lost
    assert not set(compaction.stored_labels(sorted(NOT_FACTS))) & lost


@pytest.mark.parametrize(("text", "fact"), [
    ("Your flight LH441 leaves at nine.", "LH441"), ("Booking ref X7K9P2 is confirmed.", "X7K9P2"),
    ("Invoice INV2291 was paid.", "INV2291"), ("Order ord_8fK2xQ has shipped.", "ord_8fK2xQ"),
    ("Write to jane.doe@example.com about it.", "jane.doe@example.com"),
    ("The key is 3fa85f64-5717-4562-b3fc-2c963f66afa6.", "3fa85f64-5717-4562-b3fc-2c963f66afa6")])
def test_codes_without_a_dash_and_emails_are_facts(text: str, fact: str) -> None:
    # a summary drops "LH441" as readily as "INV-2291": none of these was a fact before
    assert fact in compaction.facts(text)


def test_a_number_with_its_unit_is_still_a_number() -> None:
    assert compaction.facts("Collect the 10kg box at 5pm on the 3rd.") == {"10"}
