"""Hold-out traffic through foreign instrumentations: what the corpus held constant, varied.

A question asked twice at temperature 0 is the most ordinary traffic there is (a FAQ bot, a retry, a
cached landing page). Under OpenInference (the openai SDK, and langchain-openai through it) the answer's
identity must be the answer, not the response body around it: ``output.value`` carries the response id and
creation time, new on every call, and hashed whole it made every repeat "the same prompt, a different
answer" (``forward.batching`` warning on a clean app). And JSON asked for in words, cut at max_tokens, is a
structured answer cut there, under every capture mode, as through llmtrace's own middleware; retrieved passages
pasted in without ids are ``intake.evidence_formatting``'s, as they are there. Real packages,
real ``llmtrace serve``, real ``llmtrace collect``, ``diagnose --json`` as a subprocess.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from collector_helpers import (
    ForeignApp,
    RunningCollector,
    diagnose_services,
    query,
    send_foreign,
    start_collector,
)
from testkit import RunningServer

DESK = ("You are the help desk of the Quillmark lending library. Check the member card before renewing, "
        "never waive a fine above ten pounds, and keep each reply to two short sentences. ") * 2
ASKS = ["Can I renew The Hobbit again?", "Is the story hour on this Saturday?"]
APPS = ("openinference", "langchain")


def _calls() -> list[dict[str, Any]]:
    # each question three times, streamed and buffered alternately: identical answers at temperature 0
    return [{"messages": [{"role": "system", "content": DESK}, {"role": "user", "content": ASKS[i % 2]}],
             "max_tokens": 5, "stream": i % 3 == 1} for i in range(6)]


def _json_calls() -> list[dict[str, Any]]:
    ask = "Return only a JSON object with the keys title and due_date for my loan number {n}."
    return [{"messages": [{"role": "user", "content": ask.format(n=i)}], "max_tokens": 6, "stream": i % 2 == 1}
            for i in range(6)]


KB = ["Fines are capped at ten pounds per item and are waived for members under sixteen.",
      "Study rooms can be booked up to seven days ahead at the Eastside and Northgate branches.",
      "Lost items are charged at the replacement price plus a two pound processing fee.",
      "A loan can be renewed three times unless another member has reserved the item."]


def _rag_calls(labelled: bool) -> list[dict[str, Any]]:
    out = []
    for i in range(4):
        picked = [KB[(i + k) % 4] for k in range(3)] + ([] if labelled else [KB[i % 4]])  # one sent twice
        ctx = ("\n".join(f'<source id="kb-{(i + k) % 4}">{p}</source>' for k, p in enumerate(picked)) if labelled
               else "\n\n".join(picked))
        out.append({"messages": [{"role": "system", "content": DESK},
                                 {"role": "user", "content": f"Context:\n{ctx}\n\n{ASKS[i % 2]}"}],
                    "max_tokens": 4, "stream": i % 2 == 1})
    return out


@pytest.fixture(scope="module")
def collected(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[RunningCollector, dict[str, list[dict[str, Any]]]]]:
    tmp = tmp_path_factory.mktemp("holdout-foreign")
    col = start_collector(tmp)
    try:
        apps = {}
        for app in APPS:
            runs = [("repeat", _calls()), ("json", _json_calls()), ("rag", _rag_calls(False))]
            if app == "openinference":
                runs.append(("ragok", _rag_calls(True)))  # the clean twin: each passage tagged with its id
            apps.update({f"{what}-{app}": ForeignApp(app, calls) for what, calls in runs})
        send_foreign(col, tmp, tiny_server.base_url + "/v1", apps)
        yield col, diagnose_services(col.db, list(apps))
    finally:
        col.stop()


@pytest.mark.parametrize("app", APPS)
def test_a_repeated_question_has_one_answer_on_record(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]], app: str) -> None:
    col, found = collected
    rows = query(col.db, "SELECT prompt_hash, count(*), count(DISTINCT output_hash), count(output_hash) "
                         "FROM passes WHERE service = ? GROUP BY prompt_hash", [f"repeat-{app}"])
    assert sorted(r[1] for r in rows) == [3, 3], rows  # the two questions, each asked three times
    assert all(r[3] == 3 and r[2] == 1 for r in rows), rows  # an answer on record, the same each time
    loud = [(f["severity"], f["stage"], f["title"]) for f in found[f"repeat-{app}"] if f["severity"] != "info"]
    assert not loud, loud


@pytest.mark.parametrize("app", APPS)
def test_json_asked_for_in_words_and_cut_is_a_structured_answer_cut(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]], app: str) -> None:
    col, found = collected
    rows = query(col.db, "SELECT finish_reason, json_extract_string(attributes, '$.\"llmtrace.output.asked_in_words\"') "
                         "FROM requests WHERE service = ?", [f"json-{app}"])
    assert rows and all(r == ("length", "json") for r in rows), rows
    (cut,) = [f for f in found[f"json-{app}"] if f["stage"] == "gen.stop"]
    assert "structured answers (JSON asked for) were cut" in cut["title"], cut["title"]
    assert "safety.stop_reason" in cut["stages"], cut


@pytest.mark.parametrize("app", APPS)
def test_passages_pasted_without_ids_are_named_from_foreign_spans(
        collected: tuple[RunningCollector, dict[str, list[dict[str, Any]]]], app: str) -> None:
    _, found = collected
    ev = [f for f in found[f"rag-{app}"] if f["stage"] == "intake.evidence_formatting"]
    assert ev and ev[0]["severity"] == "critical" and found[f"rag-{app}"][0] == ev[0], found[f"rag-{app}"]
    assert "without labels or delimiters" in ev[0]["title"], ev[0]["title"]
    assert not [f for f in found["ragok-openinference"] if f["severity"] != "info"], found["ragok-openinference"]
