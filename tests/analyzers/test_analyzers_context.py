"""Context symptoms (forgetting, wrong source, loops, foreign template, invisible characters), planted for
real with the adapters' app-side helpers around passes through the in-process backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from analyzers_live import client, expect_first, findings, server, store

from llmtrace.adapters.helpers.budget import Budget, BudgetExceeded
from llmtrace.adapters.helpers.compaction import compact
from llmtrace.adapters.helpers.loops import ToolCall, dispatch
from llmtrace.adapters.helpers.prompt_assembly import format_evidence

pytestmark = pytest.mark.slow

HISTORY = [
    {"role": "system", "content": "You are Acme's support agent."},
    {"role": "user", "content": "My order 48213 for a blender arrived broken; I paid 129.90 EUR."},
    {"role": "assistant", "content": "Sorry to hear that. I can help with a replacement or a refund."},
    {"role": "user", "content": "Replacement please, but not before Friday."},
    {"role": "assistant", "content": "Noted: a replacement, delivered after Friday."},
    {"role": "user", "content": "Also my address changed last month."},
    {"role": "assistant", "content": "Please send the new address."},
    {"role": "user", "content": "It is 12 Rue Verte, Lyon."},
]


def _session(tmp: Path, summary: str | None) -> Path:
    """A compaction whose summary is ``summary`` (None: a terse summary that keeps every name and number)."""
    srv = server()
    c = client(srv)

    def summarize(turns: list[dict[str, str]]) -> str:
        return summary if summary is not None else " ".join(t["content"] for t in turns)

    with store(tmp / "t.duckdb") as db:
        res = compact(HISTORY, summarize, trigger_tokens=40, keep_last=2)
        c.chat.completions.create(model=srv.model_id, messages=[*res.messages, {"role": "user", "content": "Which order was it?"}],
                                  max_tokens=8, temperature=0)
    return db


def test_session_forgets_names_compaction_and_the_lost_fact(tmp_path: Path) -> None:
    db = _session(tmp_path, "The customer wants a replacement for a broken item.")
    found = expect_first(db, "session_forgets", "loop.compaction")
    lost = next(e for e in found[0].evidence if e.label == "facts lost").value
    assert any("48213" in str(x) for x in lost)


def test_session_forgets_silent_when_the_summary_keeps_the_facts(tmp_path: Path) -> None:
    db = _session(tmp_path, None)
    assert findings(db, "session_forgets") == []


CHUNKS = ["Returns are free within 30 days (returns policy).", "Blenders carry a 2-year warranty (warranty page).",
          "Refunds take 5 business days (billing FAQ)."]


def _rag(tmp: Path, **fmt: str) -> Path:
    srv = server()
    c = client(srv)
    with store(tmp / "t.duckdb") as db:
        ev = format_evidence(CHUNKS, **fmt)
        c.chat.completions.create(model=srv.model_id, max_tokens=6, temperature=0, messages=[
            {"role": "system", "content": "Answer from the sources.\n" + ev.text},
            {"role": "user", "content": "How long is the warranty, and where does it say so?"}])
    return db


def test_wrong_source_names_evidence_formatting(tmp_path: Path) -> None:
    db = _rag(tmp_path, id_scheme="none", delimiter="none")
    expect_first(db, "wrong_source", "intake.evidence_formatting")


def test_wrong_source_silent_with_labels(tmp_path: Path) -> None:
    assert findings(_rag(tmp_path, id_scheme="source_id", delimiter="xml"), "wrong_source") == []


def _agent(tmp: Path, same_args: bool) -> Path:
    srv = server()
    c = client(srv)
    with store(tmp / "t.duckdb") as db:
        with Budget(max_steps=8, loop_repeats=3) as budget:
            try:
                for step in range(5):
                    r = c.chat.completions.create(model=srv.model_id, max_tokens=4, temperature=0,
                                                  messages=[{"role": "user", "content": "Where is order 48213?"}])
                    budget.add_response(r)
                    order = "48213" if same_args else str(48213 + step)
                    dispatch(ToolCall("order_status", {"order_id": order}, f"call_{step}"),
                             lambda order_id: {"status": "unknown"}, budget=budget)
                    if not same_args and step == 1:
                        break
            except BudgetExceeded:
                pass
    return db


def test_agent_loops_names_budget(tmp_path: Path) -> None:
    expect_first(_agent(tmp_path, same_args=True), "agent_loops", "loop.budget")


def test_agent_loops_silent_for_a_short_run(tmp_path: Path) -> None:
    assert findings(_agent(tmp_path, same_args=False), "agent_loops") == []


def _one_pass(tmp: Path, content: str, kind: str = "default") -> Path:
    """One short chat pass through the ``kind`` server, into a fresh store."""
    srv = server(kind, tmp)
    c = client(srv)
    with store(tmp / "t.duckdb") as db:
        c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": content}], max_tokens=4)
    return db


def test_below_model_card_names_chat_template(tmp_path: Path) -> None:
    expect_first(_one_pass(tmp_path, "Hello", "odd"), "below_model_card", "intake.chat_template")


def test_below_model_card_silent_on_the_models_template(tmp_path: Path) -> None:
    assert findings(_one_pass(tmp_path, "Hello"), "below_model_card") == []


def test_invisible_characters_names_normalization(tmp_path: Path) -> None:
    pasted = "My\u200b order\u00a0number is 4\u200d8213 and\u2060 it is late."
    expect_first(_one_pass(tmp_path, pasted), "invisible_characters", "intake.normalization")


def test_invisible_characters_silent_on_clean_text(tmp_path: Path) -> None:
    assert findings(_one_pass(tmp_path, "My order is late."), "invisible_characters") == []
