"""The in-process server (``start_background``): one process, the caller's tracer and store."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from server_testkit import wait_rows

import llmtrace
from llmtrace.backend.server.background import start_background


@pytest.mark.slow
def test_background_server_serves_and_records_into_the_callers_store(traced: Path) -> None:
    srv = start_background("tiny", alias=["support-model=tiny"])
    try:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="support-model", messages=[{"role": "user", "content": "hello"}], max_tokens=3)
        assert raw.parse().model == "tiny"
        trace_id = raw.headers["x-llmtrace-trace-id"]
    finally:
        srv.stop()
    llmtrace.force_flush()
    rows = wait_rows(traced, "SELECT service, side, status, model, response_model FROM requests WHERE trace_id = ?",
                     [trace_id])
    assert rows == [("test", "server", "ok", "support-model", "tiny")]
