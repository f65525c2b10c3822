"""Every value llmtrace writes is declared in the registry: over real runs of the engine and server
(`llmtrace serve`) and the middleware around the official SDKs (the collector's mapping: in
tests/collector/test_collector_registry.py), each stage span's values are declared on its stage (or on
every stage), and each pass span's values in the pass catalog. Names outside llmtrace's own namespaces
(``llmtrace.*`` and the ``gen_ai.*`` names we write) are the senders' and are not ours to declare."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import openai
import pytest
from testkit import RunningServer, undeclared

import llmtrace


@pytest.mark.slow
def test_server_and_middleware_write_only_declared_values(tiny_server: RunningServer, tmp_path: Path) -> None:
    app_db = tmp_path / "app.duckdb"
    llmtrace.init(db=app_db, service_name="registry-app", strict=True)
    try:
        oai = llmtrace.instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x", max_retries=0))
        ant = llmtrace.instrument(anthropic.Anthropic(base_url=tiny_server.base_url, api_key="x", max_retries=0))
        msgs = [{"role": "system", "content": "Now: 2026-12-01T10:00:00Z. You help."},
                {"role": "user", "content": "Give me JSON with the order id."}]
        oai.chat.completions.create(model="tiny", messages=msgs, max_tokens=8)  # type: ignore[arg-type]
        for _ in oai.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, stream=True):  # type: ignore[arg-type]
            pass
        oai.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, tools=[{  # type: ignore[arg-type]
            "type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}])
        oai.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6)
        oai.responses.create(model="tiny", input="Say hi.", max_output_tokens=6)
        ant.messages.create(model="tiny", max_tokens=6, messages=[{"role": "user", "content": "Hi."}])
    finally:
        llmtrace.shutdown()
    time.sleep(1.5)  # the server's exporter flushes in the background
    assert not undeclared(app_db), f"declare these in the registry: {sorted(undeclared(app_db))}"
    server = undeclared(tiny_server.db_path)
    assert not server, f"declare these in the registry: {sorted(server)}"
