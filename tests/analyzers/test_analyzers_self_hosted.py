"""The official SDK pointed at a self-hosted server (here the real `llmtrace serve`), only the middleware
in the app's store: a hosted provider's 1,024-token minimum prefix does not apply, so a short-ish prompt
with a changing id in the middle of its system prompt is a cache loss at that id, not "too short to cache"."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from testkit import RunningServer

import llmtrace

POLICY = ("You are the returns assistant for Nordwind Outdoor. Refunds go to the original card within "
          "ten working days. Never quote a courier tracking number you were not given. ") * 7


@pytest.mark.slow
def test_client_only_store_names_the_id_mid_system_prompt(tiny_server: RunningServer, tmp_path: Path) -> None:
    db = tmp_path / "app.duckdb"
    llmtrace.init(db=db, service_name="returns", strict=True)
    try:
        client = llmtrace.instrument(openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="x",
                                                   max_retries=0))
        for i in range(8):
            system = POLICY[:600] + f" Session: {secrets.token_hex(6)}. " + POLICY[600:]
            client.chat.completions.create(model="tiny", max_tokens=4, temperature=0, messages=[
                {"role": "system", "content": system}, {"role": "user", "content": f"Where is order {1000 + i}?"}])
    finally:
        llmtrace.shutdown()
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "diagnose", "--db", str(db), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    findings = json.loads(out.stdout)
    findings = findings["findings"] if isinstance(findings, dict) else findings
    top = findings[0]
    assert top["stage"] == "cache.prefix_match" and top["severity"] != "info", findings
    assert "hex_id" in top["title"] and "char 610" in top["title"], top["title"]
