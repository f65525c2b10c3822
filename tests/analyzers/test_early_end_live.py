"""Answers ended by a stop string that also occurs inside their own content, through the real server and the
real OpenAI and Anthropic SDKs (instrument()), against their twins: the same calls without the stop string, and
a stop string that never occurs in the answer. The tiny model's answers are pinned by a JSON schema enum, so the
content the stop string meets is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyzers_live import client, findings, server, store

from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.store import read_connection


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": list(values)}},
        "required": ["answer"], "additionalProperties": False}}}


def _openai_calls(c: Any, model: str, stop: list[str] | None, answers: list[str]) -> list[str]:
    out = []
    for i, a in enumerate(answers):
        kw: dict[str, Any] = {"stop": stop} if stop else {}
        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": f"How far is depot {i}?"}],
                                      max_tokens=40, temperature=0, response_format=_enum(a), **kw)
        out.append(r.choices[0].message.content or "")
    return out


def _gen_stop(path: Path) -> list[dict[str, Any]]:
    with read_connection(path) as conn:
        rows = conn.execute("SELECT attributes FROM spans WHERE stage = ?", [S.GEN_STOP]).fetchall()
    return [json.loads(r[0]) if isinstance(r[0], str) else dict(r[0]) for r in rows]


DISTANCES = [f"The depot is {n}.5 km away" for n in (3, 7, 12, 4, 9)]


def test_period_after_digit_named_at_gen_stop_and_no_text_kept(tmp_path: Path) -> None:
    srv = server()
    with store(tmp_path / "t.duckdb", capture="hashes") as db:
        got = _openai_calls(client(srv), srv.model_id, ["."], DISTANCES)
    assert all(g.endswith(("3", "7", "12", "4", "9")) for g in got), got  # the stop string cut mid-number
    found = findings(db, "early_end")
    assert found and found[0].stage == S.GEN_STOP, found
    f = found[0]
    ev = {e.label: e.value for e in f.evidence}
    assert ev["what preceded the cut"] == "digit" and ev["what the cut was inside"] == "json_string", ev
    assert ev["stop string (class, length)"] == "period, 1"
    assert f.severity == "critical" and f.affected_share >= 0.99
    rows = _gen_stop(db)
    server_rows = [r for r in rows if r.get(N.STOP_KIND) == "stop_string"]
    assert len(server_rows) == len(DISTANCES)  # the server knows which stop string matched
    assert all(r.get(N.STOP_MATCHED) is None for r in server_rows)  # hashes mode: no stop-string text
    assert all(r[N.STOP_STRING_CLASS] == "period" and r[N.STOP_STRING_CHARS] == 1 for r in server_rows)
    # the client of an OpenAI-style API hears only "stop": it records the output's end classes all the same
    client_rows = [r for r in rows if r.get(N.STOP_KIND) == "stop_unknown"]
    assert len(client_rows) == len(DISTANCES) and all(r[N.STOP_PRECEDED_BY] == "digit" for r in client_rows)


def test_twins_without_the_stop_or_with_one_that_never_meets_content_are_silent(tmp_path: Path) -> None:
    srv = server()
    with store(tmp_path / "none.duckdb", capture="hashes") as db:
        _openai_calls(client(srv), srv.model_id, None, DISTANCES)
    assert findings(db, "early_end") == []
    with store(tmp_path / "marker.duckdb", capture="hashes") as db2:
        got = _openai_calls(client(srv), srv.model_id, ["<<END>>"], DISTANCES)
    assert all(g.endswith("}") for g in got), got  # whole answers
    assert findings(db2, "early_end") == []
    kinds = {r.get(N.STOP_KIND) for r in _gen_stop(db2)}
    assert "end_turn" in kinds and "stop_string" not in kinds, kinds


def test_anthropic_stop_sequence_after_abbreviation(tmp_path: Path) -> None:
    import anthropic

    from llmtrace.adapters import instrument

    srv = server()
    answers = [f"Allow approx. {n} minutes for the transfer" for n in (20, 35, 50, 15)]
    with store(tmp_path / "a.duckdb", capture="full") as db:
        a = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
        for i, ans in enumerate(answers):
            schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": [ans]}},
                      "required": ["answer"], "additionalProperties": False}
            m = a.messages.create(model=srv.model_id, max_tokens=40, stop_sequences=["."],
                                  messages=[{"role": "user", "content": f"How long for transfer {i}?"}],
                                  extra_body={"temperature": 0,
                                              "output_config": {"format": {"type": "json_schema", "schema": schema}}})
            assert m.stop_reason == "stop_sequence" and m.stop_sequence == "."
    found = findings(db, "early_end")
    assert found and found[0].stage == S.GEN_STOP
    ev = {e.label: e.value for e in found[0].evidence}
    assert ev["what preceded the cut"] == "abbreviation", ev
    # both sides know: Anthropic names the stop sequence, the server matched it; full capture keeps its text
    rows = [r for r in _gen_stop(db) if r.get(N.STOP_KIND) == "stop_string"]
    assert len(rows) == 2 * len(answers) and all(r.get(N.STOP_MATCHED) == "." for r in rows if N.STOP_MATCHED in r)


def test_every_end_is_one_kind_length_end_turn_and_a_stream_the_app_left(tmp_path: Path) -> None:
    srv = server()
    with store(tmp_path / "k.duckdb", capture="hashes") as db:
        c = client(srv)
        msgs = [{"role": "user", "content": "Status of order 5?"}]
        c.chat.completions.create(model=srv.model_id, messages=msgs, max_tokens=3, temperature=0)  # the cap
        c.chat.completions.create(model=srv.model_id, messages=msgs, max_tokens=40, temperature=0,
                                  response_format=_enum("Shipped"))  # the grammar completes: the turn's end
        stream = c.chat.completions.create(model=srv.model_id, messages=msgs, max_tokens=200, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()  # the app walks away mid-answer
    kinds = [r.get(N.STOP_KIND) for r in _gen_stop(db)]
    assert kinds.count("length") == 2 and kinds.count("end_turn") == 2, kinds  # client and server each
    assert "client_disconnect" in kinds, kinds
    assert findings(db, "early_end") == []
