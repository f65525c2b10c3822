"""The report over calls made to ``llmtrace serve`` with the real OpenAI SDK through ``instrument()``: a failed call
(404, unknown model) is a finding with its message and a trace page that says why; a buffered call's stream set-up
and prefix match (a wait the client saw up to the first byte) are marked unseen, not drawn as the stage's time, and
the time share names "the whole call (not split)" instead of an unobserved share."""

from __future__ import annotations

import openai
import pytest
from report_helpers import write_report
from testkit import RunningServer

import llmtrace
from llmtrace.adapters import instrument

MSGS = [{"role": "user", "content": "Where is my parcel?"}]
UNKNOWN = "gpt-4o-mini-not-served"


@pytest.fixture(scope="module")
def report_html(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    db = tmp_path_factory.mktemp("failed-report") / "app.duckdb"
    llmtrace.init(db=db, service_name="parcel-desk", capture="hashes", strict=True)
    try:
        client = instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="sk-unused", max_retries=0))
        for _ in range(2):
            client.chat.completions.create(model="tiny", max_tokens=16, messages=MSGS)  # buffered: headers come last
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=UNKNOWN, messages=MSGS)
    finally:
        llmtrace.shutdown()
    out = db.with_name("report.html")
    assert write_report(["report", "--db", str(db), "-o", str(out)]) == 0
    return out.read_text()


def test_the_report_shows_why_a_call_failed(report_html: str) -> None:
    message = f"HTTP 404: The model &#x27;{UNKNOWN}&#x27; does not exist"
    assert 'data-finding="failed_calls"' in report_html
    assert "1 of 3 calls failed: unknown model (HTTP 404)" in report_html
    # the finding's evidence and the failed trace's own page both quote the message
    assert report_html.count(message) >= 2, report_html[:2000]
    assert '<p class="failed"><b>failed:</b> ' + message in report_html


def test_the_report_draws_no_stage_as_the_whole_wait(report_html: str) -> None:
    assert "own time unseen (inside a" in report_html  # the stream set-up and prefix match of a traced call
    assert "the whole call (not split)" in report_html
