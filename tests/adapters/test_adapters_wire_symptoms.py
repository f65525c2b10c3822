"""Symptom-table causes the middleware reads off the wire alone, with no llmtrace helper in the app:
retrieved passages pasted without ids (right fact, wrong source) and a conversation whose compaction
dropped a detail (long session forgets). Real OpenAI SDK against the real ``llmtrace serve`` (tiny model),
``diagnose --json`` in this process; nothing of the prompts reaches the store in ``hashes`` mode.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import openai
from adapters_store import assert_no_text, rows

import llmtrace
from llmtrace.adapters import instrument
from llmtrace.cli import main

PASSAGES = [
    "Wharf 9 takes refrigerated containers only between six and ten in the morning on weekdays.",
    "Consignments held at customs for more than five days are charged a storage fee per pallet.",
    "The northern yard gate closes at noon on Saturdays; drivers arriving later are turned away.",
]
ASK = "When can a reefer be dropped at the wharf?"


def _client(server: Any) -> Any:
    return instrument(openai.OpenAI(api_key="sk-test", base_url=f"{server.base_url}/v1", max_retries=0))


def _findings(db: Path) -> list[dict[str, Any]]:
    llmtrace.force_flush()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["diagnose", "--db", str(db), "--json"]) == 0
    return list(json.loads(buf.getvalue())["findings"])


def _evidence(db: Path) -> list[dict[str, Any]]:
    return [r["attributes"] for r in rows(db, "SELECT attributes FROM spans WHERE stage = 'intake.evidence_formatting'")]


def test_passages_pasted_without_ids_are_read_off_the_wire_and_named(tiny_server: Any, traced: Path) -> None:
    client = _client(tiny_server)
    body = "Use only the passages that follow.\n\n" + "\n\n".join(PASSAGES + [PASSAGES[1]]) + f"\n\n{ASK}"
    for _ in range(3):
        client.chat.completions.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": body}])
    shapes = _evidence(traced)
    assert len(shapes) == 3
    a = shapes[0]
    assert (a["llmtrace.evidence.chunks_in"], a["llmtrace.evidence.chunks_out"]) == (4, 3)
    assert a["llmtrace.evidence.duplicates_sent"] == 1 and a["llmtrace.evidence.id_scheme"] == "none"
    assert a["llmtrace.evidence.observed"] == "wire"
    found = _findings(traced)
    assert found and found[0]["stage"] == "intake.evidence_formatting" and found[0]["severity"] != "info"
    assert_no_text(traced, *PASSAGES, ASK)


def test_passages_with_ids_and_tags_raise_nothing(tiny_server: Any, traced: Path) -> None:
    client = _client(tiny_server)
    tagged = "\n".join(f'<source ref="yard-{i}">{p}</source>' for i, p in enumerate(PASSAGES))
    labelled = "Search results:\n\n" + "\n\n".join(f"[{i + 1}] {p}" for i, p in enumerate(PASSAGES))
    for body in (tagged, labelled):
        client.chat.completions.create(model="tiny", max_tokens=4,
                                       messages=[{"role": "system", "content": body}, {"role": "user", "content": ASK}])
    shapes = _evidence(traced)
    assert [s["llmtrace.evidence.id_scheme"] for s in shapes] == ["source_id", "index"]
    assert [s["llmtrace.evidence.delimiter"] for s in shapes] == ["xml", "label"]
    assert not [f for f in _findings(traced) if f["stage"] == "intake.evidence_formatting"]


def _chat(client: Any, keep_detail: bool) -> None:
    """A support chat that grows for four turns, then the app trims it to a summary of its own making."""
    system = {"role": "system", "content": "You help drivers of Osterby Haulage with their bookings."}
    turns = [("My booking is BK-88213 for Thursday.", "Noted, booking BK-88213 on Thursday."),
             ("The trailer plate is DX-4410.", "Thanks, plate DX-4410 saved."),
             ("Can I arrive an hour late?", "Yes, up to one hour is fine."),
             ("Is the wash bay open?", "The wash bay opens at seven.")]
    history: list[dict[str, str]] = [system]
    with llmtrace.session(f"drv-{keep_detail}"):
        for q, a in turns:
            history.append({"role": "user", "content": q})
            client.chat.completions.create(model="tiny", max_tokens=2, messages=history)
            history.append({"role": "assistant", "content": a})
        summary = ("Earlier: booking BK-88213 on Thursday, plate DX-4410, late arrival allowed." if keep_detail
                   else "Earlier: the driver asked about a booking and arriving late.")
        client.chat.completions.create(model="tiny", max_tokens=2, messages=[
            system, {"role": "user", "content": summary}, {"role": "user", "content": "What was my plate again?"}])


def test_a_summary_that_drops_ids_is_wire_compaction_that_lost_facts(tiny_server: Any, traced: Path) -> None:
    _chat(_client(tiny_server), keep_detail=False)
    comp = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert len(comp) == 1 and comp[0]["llmtrace.compaction.observed"] == "wire"
    lost = comp[0]["llmtrace.compaction.facts_lost"]
    assert comp[0]["llmtrace.compaction.facts_lost_count"] == len(lost) >= 2  # the booking and the plate
    assert all("#" in f for f in lost)  # kinds and keyed hashes, not the ids themselves
    found = _findings(traced)
    assert found and found[0]["stage"] == "loop.compaction"
    assert_no_text(traced, "BK-88213", "DX-4410", "Osterby Haulage")


def test_a_summary_that_keeps_the_ids_loses_nothing(tiny_server: Any, traced: Path) -> None:
    _chat(_client(tiny_server), keep_detail=True)
    comp = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert len(comp) == 1 and comp[0]["llmtrace.compaction.history_rewritten"] is True
    # "Noted", "Thanks", "Yes", "Earlier" open sentences: capitalised by grammar, not facts
    assert comp[0]["llmtrace.compaction.facts_lost"] == []
    assert not [f for f in _findings(traced) if f["stage"] == "loop.compaction" and f["severity"] != "info"]


def test_one_passage_under_two_ids_is_named_as_a_duplicate(tiny_server: Any, traced: Path) -> None:
    client = _client(tiny_server)
    docs = [("yard-1", PASSAGES[0]), ("yard-2", PASSAGES[1]), ("memo-7", PASSAGES[0])]
    body = "\n".join(f'<doc id="{i}">{p}</doc>' for i, p in docs)
    for _ in range(2):
        client.chat.completions.create(model="tiny", max_tokens=4,
                                       messages=[{"role": "system", "content": body}, {"role": "user", "content": ASK}])
    shape = _evidence(traced)[0]
    assert (shape["llmtrace.evidence.id_scheme"], shape["llmtrace.evidence.duplicates_sent"]) == ("source_id", 1)
    found = [f for f in _findings(traced) if f["stage"] == "intake.evidence_formatting"]
    assert found and "more than once" in found[0]["title"] and found[0]["severity"] == "warning"


def test_a_provider_filter_after_streamed_text_is_text_shown_then_refused(traced: Path) -> None:
    """A provider (not our server) streams an answer and then stops it with content_filter: no moderation
    stage exists anywhere, the pass's finish reason and output say what the user saw."""
    from adapters_fake_provider import Script, fake_provider, sse

    def chunk(content: str | None, finish: str | None = None) -> dict[str, Any]:
        delta = {"content": content} if content is not None else {}
        return {"id": "c1", "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    usage = {"id": "c1", "model": "gpt-4o-mini", "choices": [],
             "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}}
    with fake_provider() as fp:
        fp.scripts["/v1/chat/completions"] = Script(content_type="text/event-stream", chunks=sse(
            chunk("The depot will"), chunk(" reimburse the"), chunk(None, "content_filter"), usage))
        client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{fp.base_url}/v1", max_retries=0))
        for _ in range(3):
            shown = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}], stream=True) if c.choices)
            assert shown == "The depot will reimburse the"
    found = _findings(traced)
    assert found and found[0]["stage"] == "safety.moderation" and "after they had produced text" in found[0]["title"]


def test_the_same_opening_with_another_question_is_no_lost_fact(tiny_server: Any, traced: Path) -> None:
    """One opening exchange reused for each new question (an FAQ bot), or a turn edited in place: the history
    is rewritten, but nothing was summarised away."""
    client = _client(tiny_server)
    opening = [{"role": "system", "content": "You answer for the Osterby Haulage yard."},
               {"role": "user", "content": "I drive for Kestrel Freight, truck KF-2231."},
               {"role": "assistant", "content": "Welcome, Kestrel Freight truck KF-2231 is registered."}]
    for q in ("Where is bay 12?", "Is the wash bay open on Sunday?", "Can I park overnight at gate 3?"):
        client.chat.completions.create(model="tiny", max_tokens=2, messages=[*opening, {"role": "user", "content": q}])
    # each question after the shared opening is a conversation of its own (no rewrite at all) or, read as a
    # rewrite, one that dropped nothing
    comp = [r["attributes"] for r in rows(traced, "SELECT attributes FROM spans WHERE stage = 'loop.compaction'")]
    assert all(c["llmtrace.compaction.facts_lost"] == [] for c in comp)
    assert not [f for f in _findings(traced) if f["stage"] == "loop.compaction" and f["severity"] != "info"]


def test_bulleted_passages_under_a_colon_cue_are_read_as_unlabelled(tiny_server: Any, traced: Path) -> None:
    client = _client(tiny_server)
    body = "Use this information:\n" + "\n".join(f"- {p}" for p in PASSAGES) + f"\n\n{ASK}"
    client.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": body}])
    (shape,) = _evidence(traced)
    assert (shape["llmtrace.evidence.chunks_out"], shape["llmtrace.evidence.id_scheme"]) == (3, "none")


def test_labels_in_other_spellings_count_as_ids(tiny_server: Any, traced: Path) -> None:
    client = _client(tiny_server)
    spellings = [lambda i, p: f"Source {i} (yard-{i}.pdf): {p}", lambda i, p: f"【{i}】{p}",
                 lambda i, p: f"Document {'ABC'[i]} — yard rules: {p}", lambda i, p: f"Title: Yard note {i}\n{p}"]
    for label in spellings:
        body = "Context:\n\n" + "\n\n".join(label(i, p) for i, p in enumerate(PASSAGES)) + f"\n\n{ASK}"
        client.chat.completions.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": body}])
    assert [s["llmtrace.evidence.unlabelled"] for s in _evidence(traced)] == [0, 0, 0, 0]
    assert not [f for f in _findings(traced) if f["stage"] == "intake.evidence_formatting"]
