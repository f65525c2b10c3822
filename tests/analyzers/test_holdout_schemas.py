"""Hold-out structured output: one question asked under several response schemas, each allowing a single
answer (a bot whose reply the app fixes per case), at temperature 0. Each answer is its schema's, every
token forced by the constraint, so two answers to one prompt are by design, not batching or sampling
nondeterminism (the schema is not part of the prompt hash). The twin: one schema, the same answer each time.
The real OpenAI SDK through ``instrument()``, the real backend, ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

from llmtrace.cli import main

DESK = ("You are the front desk of a veterinary clinic. Confirm the pet's name before booking and never give "
        "dosage advice. ") * 2
REPLIES = ["We will refund the consult fee", "A voucher for the visit is on its way", "Your refund was approved"]


def _fixed(reply: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": [reply]}},
        "required": ["answer"], "additionalProperties": False}}}


@pytest.mark.parametrize("schemas", [3, 1], ids=["three-schemas", "one-schema"])
def test_one_question_under_schemas_that_fix_the_answer_is_no_nondeterminism(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], schemas: int) -> None:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)
        for i in range(6):
            c.chat.completions.create(model="tiny", temperature=0, max_tokens=32, response_format=_fixed(REPLIES[i % schemas]),
                                      messages=[{"role": "system", "content": DESK},
                                                {"role": "user", "content": "Can I get my money back?"}])
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    loud = [(f["severity"], f["stage"], f["title"]) for f in found if f["severity"] != "info"]
    assert not loud, loud
