"""Stop strings that fire inside plain-text answers, through the middleware alone (a hosted provider's answers:
the tiny test model answers only in JSON, so these are played back by a scripted endpoint on loopback, the
bytes a provider sends), the real OpenAI and Anthropic SDKs wrapped by ``instrument()``, capture "hashes":

- inside a markdown code block opened in a plain-text answer (``` or ~~~), the provider saying only "stop":
  ``gen.stop``, "inside a code block"; the twin, the same stop string with answers that end on a sentence: quiet;
- far earlier than the same prompt template's other answers (Anthropic names the stop sequence that matched, the
  others ended their turn): ``gen.stop``; the twin, a first-line template (stop at a newline after "Yes") beside
  a template of long answers in the same service: quiet, each template is compared with its own answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from analyzers_live import findings, store

from llmtrace.tracer.registry import stage_ids as S
from llmtrace.tracer.storage.store import read_connection

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
from adapters_fake_provider import Script, fake_provider  # noqa: E402

BLOCKS = ["Here is the fix:\n\n```js\nlet total = price", "Use this query:\n~~~sql\nSELECT name FROM users",
          "Try:\n```python\nresult = compute(rows", "The loop should read:\n```go\nfor i := range items",
          "Change the line to:\n~~~\nconst rate = base"]
SENTENCES = ["The fix is to add the fee after the price.", "Select the names from the users table.",
             "Compute the result from the rows.", "Loop over the items with range.", "Set the rate from the base."]
LONG = ("Thank you for writing to us about your order. We have checked the parcel's route and it left the depot "
        "this morning; the carrier expects to deliver it within two working days, and you will get a message ")


def _openai_body(text: str) -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "model": "gpt-4o-mini", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}}).encode()


def _anthropic_body(text: str, stop: str | None) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                       "content": [{"type": "text", "text": text}],
                       "stop_reason": "stop_sequence" if stop else "end_turn", "stop_sequence": stop,
                       "usage": {"input_tokens": 40, "output_tokens": 30}}).encode()


def _no_text(db: Path, words: tuple[str, ...]) -> None:
    with read_connection(db) as conn:
        rows = conn.execute("SELECT attributes FROM spans").fetchall()
    assert rows and not any(w in str(a) for (a,) in rows for w in words)


def _code_blocks(db: Path, answers: list[str]) -> None:
    import openai

    from llmtrace.adapters import instrument

    with fake_provider() as fp, store(db, capture="hashes"):
        c = instrument(openai.OpenAI(base_url=fp.base_url + "/v1", api_key="x", max_retries=0))
        for i, text in enumerate(answers):
            fp.scripts["/v1/chat/completions"] = Script(chunks=[_openai_body(text)])
            c.chat.completions.create(model="gpt-4o-mini", max_tokens=200, stop=[";", "("],
                                      messages=[{"role": "user", "content": f"Show fix {i} as code."}])


def test_a_stop_string_inside_a_plain_text_code_block(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _code_blocks(db, BLOCKS)
    _no_text(db, ("total = price", "SELECT name", "compute"))
    found = findings(db, "early_end")
    assert found and found[0].stage == S.GEN_STOP, found
    ev = {e.label: e.value for e in found[0].evidence}
    assert ev["what the cut was inside"] == "code_fence" and "inside a code block" in found[0].title, ev
    assert found[0].severity != "info"


def test_the_same_stop_string_after_whole_sentences_is_quiet(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _code_blocks(db, SENTENCES)
    assert findings(db, "early_end") == []


def _templates(db: Path, planted: bool) -> None:
    """Eight answers of one template (a long letter; planted: four of them cut by the stop sequence right after
    the greeting), and, in the same service, a first-line template whose answers are cut at a newline after
    "Yes" or "No" on purpose."""
    import anthropic

    from llmtrace.adapters import instrument

    with fake_provider() as fp, store(db, capture="hashes"):
        a = instrument(anthropic.Anthropic(base_url=fp.base_url, api_key="x", max_retries=0))

        def ask(system: str, text: str, stop: str | None, stops: list[str], i: int) -> Any:
            fp.scripts["/v1/messages"] = Script(chunks=[_anthropic_body(text, stop)])
            return a.messages.create(model="claude-x", max_tokens=300, system=system, stop_sequences=stops,
                                     messages=[{"role": "user", "content": f"Write to customer {i}."}])

        for i in range(8):
            cut = planted and i % 2 == 0
            ask("You write replies for Kestrel Outdoor's order desk.", "Dear Mrs Okafor" if cut else LONG, "--" if cut
                else None, ["--"], i)
        for i in range(6):
            ask("Answer only Yes or No on the first line.", "Yes" if i % 2 else "No", "\n", ["\n"], i)


def test_far_earlier_than_the_templates_other_answers(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _templates(db, planted=True)
    _no_text(db, ("Okafor", "Kestrel"))
    found = findings(db, "early_end")
    assert found and found[0].stage == S.GEN_STOP, found
    assert "far earlier" in found[0].title and found[0].severity == "warning", found[0]
    ev = {e.label: e.value for e in found[0].evidence}
    assert ev["answers ended by a stop string inside their content"] == 4, ev  # the letters only, not Yes/No


def test_a_first_line_template_beside_long_answers_is_quiet(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _templates(db, planted=False)
    assert findings(db, "early_end") == []


def _openai_templates(db: Path, planted: bool) -> None:
    """An OpenAI-style client alone: the provider says only "stop" on every pass (stop strings set), so no pass is
    known to have ended on its own. Eight letters of one template ending on a sentence (planted: four cut right
    after the greeting by the role marker "User"; twin: four short whole sentences), and a first-line template
    cut at a newline after "Yes" or "No" on purpose."""
    import openai

    from llmtrace.adapters import instrument

    with fake_provider() as fp, store(db, capture="hashes"):
        c = instrument(openai.OpenAI(base_url=fp.base_url + "/v1", api_key="x", max_retries=0))

        def ask(system: str, text: str, stops: list[str], i: int) -> None:
            fp.scripts["/v1/chat/completions"] = Script(chunks=[_openai_body(text)])
            c.chat.completions.create(model="gpt-4o-mini", max_tokens=300, stop=stops, messages=[
                {"role": "system", "content": system}, {"role": "user", "content": f"Write to customer {i}."}])

        for i in range(8):
            short = "Please ask the " if planted else "It was delivered today."
            ask("You write replies for Kestrel Outdoor's order desk.", short if i % 2 == 0 else LONG + "soon.",
                ["User"], i)
        for i in range(6):
            ask("Answer only Yes or No on the first line.", "Yes" if i % 2 else "No", ["\n"], i)


def test_far_earlier_from_a_client_that_hears_only_stop(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _openai_templates(db, planted=True)
    found = findings(db, "early_end")
    assert found and found[0].stage == S.GEN_STOP and "far earlier" in found[0].title, found
    ev = {e.label: e.value for e in found[0].evidence}
    assert ev["answers ended by a stop string inside their content"] == 4, ev


def test_short_whole_sentences_beside_long_letters_are_quiet(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    _openai_templates(db, planted=False)
    assert findings(db, "early_end") == []
