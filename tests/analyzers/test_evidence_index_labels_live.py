"""A RAG app whose retrieved passages carry index labels ("Note 3:", "Entry 2 —", "FAQ 12)", a heading per
passage, Anthropic-style ``<document index=...>``) is clean: ``llmtrace diagnose`` gives it no finding above
info, while the same app pasting the passages without labels (next to a numbered instruction list, which is
no passage) is still found at ``intake.evidence_formatting``. The real OpenAI SDK wrapped by ``instrument()``
against the in-process ``llmtrace serve`` (tiny model), ``llmtrace diagnose --json`` on the store."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from analyzers_live import client, server, store

import llmtrace
from llmtrace.cli import main

pytestmark = pytest.mark.slow

KB = [
    "Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays. Late reefers "
    "wait for the next day's window.",
    "Consignments held at customs for more than five days are charged a storage fee per pallet, billed weekly "
    "to the consignee.",
    "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away by security.",
    "Hazardous goods need a declaration signed by the shipper before they may enter the terminal grounds.",
]
RULES = ("How to answer:\n1. Always cite the passage you used.\n2. Never answer from memory when the passages "
         "are silent.\n3. Keep the answer under eighty words.")
STYLES = {
    "note": "Note {n}: {p}",
    "entry": "Entry {n} — {p}",
    "faq": "FAQ {n}) {p}",
    "heading": "### {t}\n{p}",
    "document": '<document index="{n}"><source>handbook-{n}.pdf</source><document_content>{p}</document_content>'
                "</document>",
    "planted": "{p}",
}
TITLES = ["Reefer window", "Customs storage", "Weekend gate", "Hazardous goods"]


def _diagnose(tmp: Path, style: str) -> list[dict[str, Any]]:
    srv = server()
    c = client(srv)
    with store(tmp / f"{style}.duckdb", capture="hashes") as db:
        for i in range(4):
            picked = [(KB[(i + k) % 4], TITLES[(i + k) % 4]) for k in range(3)]
            ctx = "\n\n".join(STYLES[style].format(n=k + 1, p=p, t=t) for k, (p, t) in enumerate(picked))
            c.chat.completions.create(model=srv.model_id, max_tokens=4, messages=[
                {"role": "system", "content": "You answer questions from port staff.\n\n" + RULES},
                {"role": "user", "content": f"Knowledge base passages:\n\n{ctx}\n\nQuestion {i}: when can I deliver?"}])
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return [f for f in json.loads(buf.getvalue())["findings"] if f["severity"] != "info"]


@pytest.mark.parametrize("style", [s for s in STYLES if s != "planted"])
def test_passages_with_index_labels_raise_nothing(tmp_path: Path, style: str) -> None:
    assert [(f["severity"], f["stage"], f["title"]) for f in _diagnose(tmp_path, style)] == []


def test_the_same_passages_pasted_without_labels_are_still_found(tmp_path: Path) -> None:
    found = _diagnose(tmp_path, "planted")
    assert found and found[0]["stage"] == "intake.evidence_formatting" and found[0]["severity"] == "critical"
    assert "without labels" in found[0]["title"]
