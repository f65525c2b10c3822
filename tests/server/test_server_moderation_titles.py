"""A lagging moderator cuts streamed and buffered answers alike; only a stream shows the text before the
verdict. ``diagnose`` says which: streams that showed text and retracted it, or whole answers generated and
then withheld (the title said "streams" for buffered answers too). Real server with ``--moderation-words``,
the official OpenAI SDK, ``diagnose --json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from testkit import diagnose_json, start_server, stop_server

pytestmark = pytest.mark.slow

SCHEMA = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
    "type": "object", "properties": {"note": {"type": "string", "enum": [
        "The carrier accepted the claim and a refund of the freight charge goes out on Friday"]}},
    "required": ["note"], "additionalProperties": False}}}


@pytest.mark.parametrize(("stream", "title"), [(True, "streams showed text and then retracted it"),
                                               (False, "answers were generated and then withheld")])
def test_the_title_says_whether_the_reader_saw_the_text(tmp_path: Path, capsys: Any, stream: bool, title: str) -> None:
    srv = start_server(tmp_path, "--moderation-words", "refund", "--moderation-every-tokens", "6")
    try:
        c = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0)
        for i in range(4):
            r = c.chat.completions.create(model="tiny", max_tokens=64, temperature=0, stream=stream,
                                          response_format=SCHEMA,  # type: ignore[arg-type]
                                          messages=[{"role": "user", "content": f"Claim {i}?"}])
            if stream:
                for _ in r:  # type: ignore[union-attr]
                    pass
    finally:
        stop_server(srv)
    found = [f for f in diagnose_json(srv.db_path, capsys) if f["stage"] == "safety.moderation"]
    assert found and title in found[0]["title"], found
