"""Labelled passages pasted into a prompt raise no "right fact, wrong source" alarm, whatever the app calls
its tags or ids (``<note id=...>``, ``tax-0: ...``, ``- [0] ...``, ``Note 3: ...``, ``FAQ 2) ...``, a title or
a source per passage), while their unlabelled twin still does.
Real OpenAI SDK, instrumented, against the loopback fake provider; ``diagnose --json`` in this process."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.cli import main

PASSAGES = ["Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays.",
            "Consignments held at customs for more than five days are charged a storage fee per pallet.",
            "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away.",
            "Hazardous goods need a declaration signed by the shipper before they may enter the terminal."]
LABELLED = {
    "tag": '<note id="tax-{i}">{p}</note>',
    "colon": "Note tax-{i}: {p}",
    "bullet": "- [{i}] {p}",
    # index labels: a word and an index, a title line, a source at the end, an indexed tag
    "note_index": "Note {n}: {p}",
    "entry_dash": "Entry {n} — {p}",
    "faq_paren": "FAQ {n}) {p}",
    "heading": "### Yard notice {n}\n{p}",
    "source_at_end": "{p} (source: yard-handbook-{n}.pdf)",
    "document_index": '<document index="{n}"><document_content>{p}</document_content></document>',
}


@pytest.fixture()
def client() -> Iterator[Any]:
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        yield instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))


def _ask(client: Any, line: str) -> None:
    for call in range(3):  # three of the four passages, picked per call as retrieval would (the same block in
        # every call's system prompt would be the app's own reference text: analyzers/symptoms/wrong_source.py)
        picked = [PASSAGES[(call + k) % len(PASSAGES)] for k in range(3)]
        body = "Relevant notes:\n" + "\n".join(line.format(i=i, n=i + 1, p=p) for i, p in enumerate(picked))
        client.chat.completions.create(model="gpt-4o-mini", max_tokens=1, messages=[
            {"role": "system", "content": body}, {"role": "user", "content": "When does the northern gate close?"}])


def _alarms(db: Path) -> list[dict[str, Any]]:
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return [f for f in json.loads(buf.getvalue())["findings"]
            if f["stage"] == "intake.evidence_formatting" and f["severity"] != "info"]


@pytest.mark.parametrize("kind", sorted(LABELLED))
def test_the_labelled_twin_raises_no_wrong_source_alarm(traced: Path, client: Any, kind: str) -> None:
    _ask(client, LABELLED[kind])
    shapes = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans "
                                                    "WHERE stage = 'intake.evidence_formatting'")]
    assert len(shapes) == 3 and all(s["llmtrace.evidence.chunks_in"] == 3 for s in shapes)
    assert {s["llmtrace.evidence.id_scheme"] for s in shapes} != {"none"}
    assert _alarms(traced) == []


def test_the_unlabelled_twin_still_raises_it(traced: Path, client: Any) -> None:
    _ask(client, "{p}")
    (alarm,) = _alarms(traced)
    assert alarm["severity"] == "critical" and "without labels" in alarm["title"]
