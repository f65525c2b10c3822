"""Reference text the app wrote once, seen through foreign instrumentations: the same company facts under
"Use the company information below" in every request's system prompt are no ``intake.evidence_formatting``
finding, as through llmtrace's own middleware (the collector records the passages' keyed set hash and where
they sat, by the message's role); facts picked per question, or the same facts in the user's message, are
still found (critical). Real OpenInference and OpenLLMetry instrumentations of the openai SDK, real
``llmtrace serve`` (tiny), real ``llmtrace collect``, ``diagnose --json`` as a subprocess."""

from __future__ import annotations

from typing import Any

import pytest
from collector_helpers import ForeignApp, diagnose_foreign
from testkit import RunningServer

pytestmark = pytest.mark.slow

INTRO = "You are the assistant of the Quillmark lending library, answering members by chat."
CUE = "Use the library information below when you answer."
FACTS = ["Quillmark was founded in 1961 and runs four branches: Eastside, Northgate, Riverside and the Central "
         "library on Bell Street.",
         "Fines are capped at ten pounds per item and are waived for members under sixteen years of age.",
         "Study rooms can be booked up to seven days ahead at the Eastside and Northgate branches only.",
         "A loan can be renewed three times unless another member has reserved the item in the meantime.",
         "Lost items are charged at the replacement price plus a two pound processing fee per item."]
ASKS = ["Where is the central library?", "How much can a fine be?", "Can I book a study room?",
        "Can I renew my loan again?", "What if I lose a book?"]


def _calls(layout: str) -> list[dict[str, Any]]:
    fixed = "\n\n".join(FACTS[:3])
    out = []
    for i, ask in enumerate(ASKS):
        if layout == "retrieved":  # three of five, picked per question
            picked = "\n\n".join(FACTS[(i + k) % len(FACTS)] for k in range(3))
            msgs = [{"role": "system", "content": f"{INTRO}\n\n{CUE}\n\n{picked}"}, {"role": "user", "content": ask}]
        elif layout == "in_user":  # the same every call, but in the user's message
            msgs = [{"role": "system", "content": INTRO}, {"role": "user", "content": f"{CUE}\n\n{fixed}\n\n{ask}"}]
        else:  # the app's own reference text, in the system prompt
            msgs = [{"role": "system", "content": f"{INTRO}\n\n{CUE}\n\n{fixed}"}, {"role": "user", "content": ask}]
        out.append({"messages": msgs, "max_tokens": 4, "stream": i % 2 == 1})
    return out


APPS = {"reference": ("openinference", "reference"), "reference_openllmetry": ("openllmetry", "reference"),
        "retrieved": ("openinference", "retrieved"), "in_user": ("openinference", "in_user")}


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    apps = {service: ForeignApp(app, _calls(layout)) for service, (app, layout) in APPS.items()}
    return diagnose_foreign(tmp_path_factory.mktemp("evidence-reference-foreign"), tiny_server.base_url + "/v1", apps)


@pytest.mark.parametrize("service", ["reference", "reference_openllmetry"])
def test_the_apps_own_reference_text_is_no_finding(found: dict[str, list[dict[str, Any]]], service: str) -> None:
    assert [(f["severity"], f["title"]) for f in found[service]
            if f["stage"] == "intake.evidence_formatting" and f["severity"] != "info"] == []


@pytest.mark.parametrize("service", ["retrieved", "in_user"])
def test_changing_passages_or_passages_in_the_user_message_are_still_found(
    found: dict[str, list[dict[str, Any]]], service: str
) -> None:
    top = found[service][0]
    assert (top["stage"], top["severity"]) == ("intake.evidence_formatting", "critical"), found[service]
    assert "without labels" in top["title"]
