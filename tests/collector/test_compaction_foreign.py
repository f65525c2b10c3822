"""A compaction seen through foreign instrumentations: the app replaces a long chat by [system, the opening
turn, a summary, the question] with no session named, and its instrumentation records the messages
(content capture on). ``llmtrace collect`` reads the conversation as the middleware does, so a summary that
dropped the order id, the name, the e-mail and the amount is ``loop.compaction``'s finding, and one that kept
them is no alarm, though both apps (services of one collector) open their chats with the same words. Real
OpenLLMetry and OpenInference instrumentations of the openai SDK, real ``llmtrace serve`` (tiny), real
``llmtrace collect``, ``diagnose --json`` as a subprocess."""

from __future__ import annotations

from typing import Any

import pytest
from collector_helpers import ForeignApp, diagnose_foreign
from testkit import RunningServer

pytestmark = pytest.mark.slow

BRIEF = ("You are the booking assistant of Northgate Coaches. Quote fares only from the fare table, offer the "
         "next departure first, and never confirm a seat before payment. Luggage over twenty kilos costs extra. ")
TURNS = [("My order NG-{o} for the Edinburgh tour has the wrong date.", "I can look into that."),
         ("It was booked by Priya Raman, priya.raman@example.org.", "Thanks, noted."),
         ("We paid £{p}.50 by card ending 7731.", "Understood."), ("The tour should be on the 19th.", "Noted.")]


def _calls(keeps: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(2):
        o, p = 55310 + n, 180 + n
        first = {"role": "user", "content": f"Hello, I need help with a booking ({n})."}
        hist: list[dict[str, Any]] = [{"role": "system", "content": BRIEF}, first,
                                      {"role": "assistant", "content": "Of course, tell me more."}]
        for q, a in TURNS:
            hist.append({"role": "user", "content": q.format(o=o, p=p)})
            out.append({"messages": list(hist), "max_tokens": 3, "stream": len(out) % 2 == 1})
            hist.append({"role": "assistant", "content": a})
        summary = (f"Summary: order NG-{o}, Edinburgh tour, booked by Priya Raman (priya.raman@example.org), paid "
                   f"£{p}.50 by card ending 7731, should be on the 19th." if keeps
                   else "Summary: a customer wants the date of a tour booking changed; payment was made.")
        out.append({"messages": [{"role": "system", "content": BRIEF}, first, {"role": "assistant", "content": summary},
                                 {"role": "user", "content": "What was my order number again?"}],
                    "max_tokens": 3, "stream": False})
    return out


APPS = {"openllmetry_drops": ("openllmetry", False), "openllmetry_keeps": ("openllmetry", True),
        "openinference_drops": ("openinference", False), "openinference_keeps": ("openinference", True)}


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    apps = {service: ForeignApp(app, _calls(keeps)) for service, (app, keeps) in APPS.items()}
    return diagnose_foreign(tmp_path_factory.mktemp("compaction-foreign"), tiny_server.base_url + "/v1", apps)


@pytest.mark.parametrize("service", ["openllmetry_drops", "openinference_drops"])
def test_a_summary_that_drops_the_ids_is_found(found: dict[str, list[dict[str, Any]]], service: str) -> None:
    top = found[service][0]
    assert top["stage"] == "loop.compaction" and top["severity"] != "info", found[service]
    assert "#" in top["title"]  # the lost facts by kind and keyed hash, never the ids themselves
    assert "NG-5531" not in str(top) and "Priya" not in str(top)


@pytest.mark.parametrize("service", ["openllmetry_keeps", "openinference_keeps"])
def test_a_summary_that_keeps_them_raises_no_alarm(found: dict[str, list[dict[str, Any]]], service: str) -> None:
    assert [f for f in found[service] if f["severity"] != "info"] == [], found[service]
