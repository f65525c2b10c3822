"""Hold-out conversations through foreign instrumentations: what the middleware reads off the messages
array, read off the input messages OpenInference and OpenLLMetry record. An agent that re-sends the same
tool call (its arguments' keys in another order, other whitespace) until the history holds it five times is
a loop (``loop.budget``), and zero-width characters that come and go in a system prompt are
``intake.normalization``'s; the clean twin (a lookup, a booking, an answer; the same prompt without them)
raises neither. Real packages, real ``llmtrace serve``, real ``llmtrace collect``, ``diagnose --json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from collector_helpers import ForeignApp, RunningCollector, diagnose_services, send_foreign, start_collector
from testkit import RunningServer

DESK = ("You are the front desk of Harrow Lane veterinary clinic. Confirm the pet's name before booking, "
        "never give dosage advice, and answer in two sentences at most. ") * 2
APPS = ("openinference", "openllmetry")
SAME = ['{"pet": "Biscuit", "owner": "Ng"}', '{"owner":"Ng","pet":"Biscuit"}', '{ "pet" : "Biscuit", "owner" : "Ng" }',
        '{"owner": "Ng",\n "pet": "Biscuit"}', '{"pet":"Biscuit","owner":"Ng"}']
WALK = [("pet_record", '{"pet": "Biscuit", "owner": "Ng"}'), ("vet_rota", '{"day": "Fri"}'),
        ("book_slot", '{"pet": "Biscuit", "day": "Fri"}')]


def _agent(stuck: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    steps = [("pet_record", a) for a in SAME] if stuck else WALK
    msgs: list[dict[str, Any]] = [{"role": "system", "content": DESK}, {"role": "user", "content": "Is Biscuit due a booster?"}]
    for k, (name, args) in enumerate(steps):
        out.append({"messages": msgs, "max_tokens": 3, "stream": k % 2 == 1})
        cid = f"call_{k}"
        msgs = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                           {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]},
                       {"role": "tool", "tool_call_id": cid, "content": "Biscuit, dog, booster due Friday."}]
    out.append({"messages": msgs, "max_tokens": 3})
    return out


def _zero_width(dirty: bool) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "system", "content": DESK.replace("front desk", "front" + "\u200b" * (1 + i % 3) * dirty
                                                                      + " desk")},
                          {"role": "user", "content": f"Can Miso come in on day {i}?"}], "max_tokens": 3,
             "stream": i % 2 == 1} for i in range(6)]


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[dict[str, Any]]]]:
    tmp = tmp_path_factory.mktemp("holdout-foreign-loops")
    col: RunningCollector = start_collector(tmp)
    try:
        apps = {f"{what}-{app}": ForeignApp(app, calls) for app in APPS
                for what, calls in (("loop", _agent(True)), ("zw", _zero_width(True)),
                                    ("clean", _agent(False) + _zero_width(False)))}
        send_foreign(col, tmp, tiny_server.base_url + "/v1", apps)
        yield diagnose_services(col.db, list(apps))
    finally:
        col.stop()


def _loud(found: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["severity"], f["stage"], f["title"]) for f in found if f["severity"] != "info"]


@pytest.mark.parametrize("app", APPS)
def test_a_tool_call_resent_until_it_loops_is_named(found: dict[str, list[dict[str, Any]]], app: str) -> None:
    loud = _loud(found[f"loop-{app}"])
    assert loud and loud[0][1] == "loop.budget", found[f"loop-{app}"]


@pytest.mark.parametrize("app", APPS)
def test_zero_width_characters_in_a_foreign_prompt_are_named(found: dict[str, list[dict[str, Any]]], app: str) -> None:
    loud = _loud(found[f"zw-{app}"])
    assert loud and loud[0][1] == "intake.normalization", found[f"zw-{app}"]


@pytest.mark.parametrize("app", APPS)
def test_the_clean_twin_raises_nothing(found: dict[str, list[dict[str, Any]]], app: str) -> None:
    assert not _loud(found[f"clean-{app}"]), found[f"clean-{app}"]
