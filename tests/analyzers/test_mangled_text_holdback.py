"""U+FFFD with the decoder's hold-back on is not a mangled stream. A character the length cap cuts after its
first bytes (or a stray byte token a real model samples at temperature 1) comes out as U+FFFD however the
decoder works; the bundled SmolLM2 does it in clean runs, and ``mangled_text`` blamed the detokenizer for it.
The engine records whether it held partial characters back (``llmtrace.detok.hold_back``): with it on such
replacements are reported as ``info``; with it off (``--detokenizer-holdback off``) split characters are still
the warning at ``gen.detokenization``.

Real server (tiny model) on loopback, the official OpenAI SDK, ``llmtrace diagnose --json``. The constraint
makes the tiny model say the label, so each cap below ends between two bytes of a character.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from testkit import diagnose_json, start_server, stop_server

LABEL = {"type": "json_schema", "json_schema": {"name": "label", "schema": {
    "type": "object", "properties": {"label": {"type": "string", "enum": ["配送済み📦"]}},
    "required": ["label"], "additionalProperties": False}}}
CUT_CAPS = (5, 8, 10, 13, 15)  # each ends on the first bytes of 配, 送, 済 or み (the tiny tokenizer splits them)


def _run(tmp: Path, *flags: str, caps: tuple[int, ...]) -> tuple[Path, list[str]]:
    srv = start_server(tmp, *flags)
    try:
        c = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        texts = [c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"Label {k}?"}],
                                           max_tokens=k, temperature=0, response_format=LABEL  # type: ignore[arg-type]
                                           ).choices[0].message.content or "" for k in caps]
    finally:
        stop_server(srv)  # a stopped server has written every span
    return srv.db_path, texts


def _detok(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if f["stage"] == "gen.detokenization"]


def test_cap_cutting_a_character_with_hold_back_on_is_no_alarm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, texts = _run(tmp_path, caps=CUT_CAPS)
    assert sum("\ufffd" in t for t in texts) >= 4, texts  # the cap did cut characters
    detok = _detok(diagnose_json(db, capsys))
    assert detok and all(f["severity"] == "info" for f in detok), [(f["severity"], f["title"]) for f in detok]
    assert "held back" in detok[0]["title"]


def test_split_characters_without_hold_back_still_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, texts = _run(tmp_path, "--detokenizer-holdback", "off", caps=(48, 48, 48))
    assert all("\ufffd" in t for t in texts), texts  # whole labels, split by the decoder
    detok = _detok(diagnose_json(db, capsys))
    assert detok and detok[0]["severity"] in ("warning", "critical"), [(f["severity"], f["title"]) for f in detok]
