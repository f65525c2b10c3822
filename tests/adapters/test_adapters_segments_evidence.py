"""One passage-shape rule for in-app and foreign traces: ``tracer.reading.evidence_shape`` (which the
collector may import), and what the middleware records off the wire is what that rule says of the same
prompt text. Real OpenAI SDK, instrumented, against the loopback
fake provider, into a real store."""

from __future__ import annotations

import uuid
from pathlib import Path

import openai
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

from llmtrace.adapters import instrument
from llmtrace.tracer.reading import evidence_shape as rule


def test_the_middleware_records_the_tracer_rules_shape(traced: Path) -> None:
    body = (f"Use the documents below ({uuid.uuid4().hex}).\n\n"
            "<doc id=\"kb-1\">Wharf 9 takes refrigerated containers only between six and ten.</doc>\n"
            "<doc id=\"kb-2\">Consignments held at customs for more than five days pay a pallet fee.</doc>\n"
            "<doc>Consignments held at customs for more than five days pay a pallet fee.</doc>\n\n"
            "Which wharf takes reefers?")
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))
        client.chat.completions.create(model="gpt-4o-mini", max_tokens=1,
                                       messages=[{"role": "system", "content": "You answer for the yard."},
                                                 {"role": "user", "content": body}])
    (recorded,) = [r["attributes"] for r in rows(
        traced, "SELECT attributes FROM spans WHERE stage = 'intake.evidence_formatting'")]
    found = rule.read([("system", "You answer for the yard."), ("user", body)])
    assert found is not None and (found[0].chunks_in, found[0].duplicates, found[0].delimiter) == (3, 1, "xml")
    assert found[1] == "user" and {k: recorded[k] for k in rule.values(*found)} == rule.values(*found)
