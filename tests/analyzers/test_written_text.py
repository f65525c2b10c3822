"""Text that only looks odd to a naive scan is not a finding: the joiners of Persian and Hindi words and of
emoji sequences, the no-break spaces of French typography, and retrieved documents sent as JSON objects with
ids. Through the real OpenAI SDK wrapped by ``instrument()`` against the in-process server (the app's and
the server's spans in one store), each next to the planted twin that must still be found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analyzers_live import all_findings, client, expect_first, findings, server, store

from llmtrace.backend.server.normalization import NormalizationPolicy

pytestmark = pytest.mark.slow

WRITTEN = [
    "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 \u0633\u0641\u0627\u0631\u0634\u0645 \u0631\u0627 \u067e\u06cc\u06af\u06cc\u0631\u06cc \u06a9\u0646\u0645",  # Persian, ZWNJ inside a word
    "\u0915\u094d\u200d\u0937 \u0914\u0930 \u0915\u094d\u200c\u0937",  # Devanagari conjuncts with ZWJ / ZWNJ after the virama
    "Order for the whole family \U0001f468\u200d\U0001f469\u200d\U0001f467 and the cat \U0001f408\u200d\u2b1b",
    "Flags: \U0001f3f3\ufe0f\u200d\U0001f308 and \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "O\u00f9 est ma commande\u202f? Elle devait arriver \u00ab\u00a0hier\u00a0\u00bb\u202f!",
]
PLANTED = "My pass\u200bword is late and the n\u200dumber\u00a0is 48213."


def _chat(tmp: Path, texts: list[str], tool_result: str | None = None) -> Path:
    srv = server()
    c = client(srv)
    with store(tmp / "t.duckdb") as db:
        for text in texts:
            messages = [{"role": "user", "content": text}]
            if tool_result is not None:
                messages = [
                    {"role": "user", "content": "Look up my order."},
                    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
                        "name": "order_status", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "call_0", "content": tool_result},
                    {"role": "user", "content": text}]
            c.chat.completions.create(model=srv.model_id, messages=messages, max_tokens=4)
    return db


def test_the_spelling_of_a_language_or_an_emoji_is_not_hidden_text(tmp_path: Path) -> None:
    assert findings(_chat(tmp_path, WRITTEN), "invisible_characters") == []


def test_a_joiner_in_an_english_word_still_is(tmp_path: Path) -> None:
    expect_first(_chat(tmp_path, [*WRITTEN, PLANTED]), "invisible_characters", "intake.normalization")


def test_a_tool_result_with_a_family_emoji_carries_no_hidden_characters(tmp_path: Path) -> None:
    db = _chat(tmp_path, ["Thanks!"], tool_result="Shipped to the " + WRITTEN[2] + " on Monday, tracking 1Z999.")
    assert [f.title for f in all_findings(db) if f.stage in ("intake.normalization", "safety.injection")] == []


def test_the_server_keeps_a_words_joiner_when_it_strips_invisible_characters() -> None:
    policy = NormalizationPolicy(strip_invisible=True)
    for text in WRITTEN:
        out, counts = policy.apply(text)
        assert (out, counts.invisible_chars, counts.nbsp) == (text, 0, 0), text
    out, counts = policy.apply(PLANTED)
    assert "\u200b" not in out and "\u200d" not in out and counts.invisible_chars == 2 and counts.nbsp == 1


DOCS = [f"Warranty note {i}: blenders bought in {2020 + i} carry a two-year warranty from the delivery date."
        for i in range(4)]


def _rag(tmp: Path, documents: str) -> Path:
    srv = server()
    c = client(srv)
    with store(tmp / "t.duckdb") as db:
        c.chat.completions.create(model=srv.model_id, max_tokens=4, messages=[{"role": "user", "content": (
            f"Documents (JSON):\n{documents}\n\nHow long is the warranty? Cite the document id.")}])
    return db


@pytest.mark.parametrize("layout", ["array", "lines", "wrapped"])
def test_json_documents_with_ids_are_labelled_sources(tmp_path: Path, layout: str) -> None:
    docs = [{"id": f"kb-{i}", "text": d} for i, d in enumerate(DOCS)]
    text = {"array": json.dumps(docs, indent=1), "lines": "\n".join(json.dumps(d) for d in docs),
            "wrapped": json.dumps({"results": docs}, indent=2)}[layout]
    assert findings(_rag(tmp_path, text), "wrong_source") == []


def test_json_documents_without_ids_are_still_unlabelled(tmp_path: Path) -> None:
    expect_first(_rag(tmp_path, json.dumps([{"text": d} for d in DOCS], indent=1)), "wrong_source",
                 "intake.evidence_formatting")
