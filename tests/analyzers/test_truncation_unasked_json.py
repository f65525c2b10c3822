"""An answer that only looks like JSON, cut at the cap, is no harm the app suffered unless it went on with it.

After tool turns in its history the bundled SmolLM2 answers in the shape of a call (`{"name": "carrier`)
though nobody asked for JSON; a small cap cuts it and it does not parse. An agent that drives its own next
step never parses that text, so a clean agent run must not get a warning at ``gen.stop`` (it did, and it
outranked the loop the run was planted with). Two things made it a warning: a JSON-shaped answer that does
not parse counted as a broken structured answer whether or not it was asked for, and with full capture the
earlier tool calls' arguments in the prompt (`{"claim": ...`) read as JSON asked for in words.

Real parts: the bundled model served in-process (greedy, so its answer is the same each run), the official
OpenAI SDK wrapped by ``instrument()``, a real DuckDB store, the ``broken_json`` analyzer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

from llmtrace.demo_server import InProcessServer

pytestmark = pytest.mark.slow


def _tool_turn(cid: str, claim: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
                "name": "carrier_contact", "arguments": json.dumps({"claim": claim})}}]},
            {"role": "tool", "tool_call_id": cid, "content": "Carrier desk: claims@northwind.example"}]


def test_unasked_json_shape_cut_and_never_sent_back_is_no_warning(tmp_path: Path) -> None:
    srv = InProcessServer(None).start()  # no --model: the bundled SmolLM2-135M
    try:
        with live.store(tmp_path / "t.duckdb", capture="full") as db:
            c = live.client(srv)
            texts = [c.chat.completions.create(
                model=srv.model_id, max_tokens=4, temperature=0,
                messages=[{"role": "user", "content": f"Chase claim {claim} for me."}, *_tool_turn(f"t{i}", claim)],
            ).choices[0].message.content or "" for i, claim in enumerate(("C-3", "C-4"))]
    finally:
        srv.stop()
    assert all(t.lstrip().startswith("{") for t in texts), texts  # the model's own JSON shape, cut at the cap
    cut = [f for f in live.findings(db, "broken_json") if f.stage == "gen.stop"]
    assert cut, "the cut answers are still reported"
    assert all(f.severity == "info" for f in cut), [(f.severity, f.title) for f in cut]
