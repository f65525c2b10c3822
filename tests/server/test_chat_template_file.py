"""``llmtrace serve --chat-template FILE`` with the model's own template saved to a file (an editor ends it
with a newline) is not a foreign template: the server records it as matching and ``diagnose`` names no
``intake.chat_template`` cause; a template that renders differently (ChatML without the model's default
system turn) still is one. Real server on loopback, the official OpenAI SDK, the store as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from testkit import diagnose_json, start_server, stop_server


def _own_template() -> str:
    """The bundled model's chat template as its GGUF file carries it (what a user would dump to a file)."""
    import gguf

    from llmtrace.backend.model.pull import default_model_path

    field = gguf.GGUFReader(default_model_path()).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


CHATML_NO_DEFAULT_SYSTEM = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                            "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                            "{{ '<|im_start|>assistant\\n' }}{% endif %}\n")


def _serve_and_call(tmp: Path, template: str, capsys: Any) -> tuple[list[bool], list[dict[str, Any]]]:
    import openai

    path = tmp / "template.jinja"
    path.write_text(template, encoding="utf-8")
    server = start_server(tmp, "--chat-template", str(path))
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
        for i in range(4):  # no system message: where the model's template adds its default system turn
            client.chat.completions.create(model="tiny", max_tokens=4, temperature=0,
                                           messages=[{"role": "user", "content": f"Which bay, coach {i}?"}])
    finally:
        stop_server(server)
    con = duckdb.connect(str(server.db_path), read_only=True)
    rows = con.execute("""SELECT json_extract(attributes, '$."llmtrace.template.matches_model"')::BOOLEAN
                          FROM spans WHERE stage = 'intake.chat_template'""").fetchall()
    con.close()
    return [bool(r[0]) for r in rows], diagnose_json(server.db_path, capsys)


@pytest.mark.timeout(300)
def test_own_template_saved_to_a_file_is_the_models_own(tmp_path: Path, capsys: Any) -> None:
    matches, findings = _serve_and_call(tmp_path, _own_template() + "\n", capsys)
    assert matches == [True] * 4
    assert not [f for f in findings if f["stage"] == "intake.chat_template"]


@pytest.mark.timeout(300)
def test_a_template_that_renders_otherwise_is_still_foreign(tmp_path: Path, capsys: Any) -> None:
    matches, findings = _serve_and_call(tmp_path, CHATML_NO_DEFAULT_SYSTEM, capsys)
    assert matches == [False] * 4
    assert findings and findings[0]["stage"] == "intake.chat_template"
