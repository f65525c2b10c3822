"""An intake step that changed what the prompt says, through `llmtrace serve --normalize nfkc` (and
`--strip-invisible`) and the real OpenAI and Anthropic SDKs, against its twins: the same prompts without the flag,
and NFKC over text that holds only drawing folds (full-width letters) or nothing to fold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzers_live import all_findings, client, findings, store

from llmtrace.tracer.reading import char_folds
from llmtrace.tracer.registry import stage_ids as S

_servers: dict[tuple[str, ...], Any] = {}


def _server(*flags: str) -> Any:
    import atexit

    from llmtrace.demo_server import InProcessServer

    if flags not in _servers:
        srv = InProcessServer("tiny", *flags).start()
        atexit.register(srv.stop)
        _servers[flags] = srv
    return _servers[flags]


MATH = ["Simplify x² + 2x for x = 3.", "Is 2⁵ more than 30?", "Write 10⁻³ as a decimal.", "What is ½ of 18?",
        "Expand (a + b)².", "Is H₂O heavier than CO₂?"]


def _ask(srv: Any, prompts: list[str]) -> None:
    c = client(srv)
    for p in prompts:
        c.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": p}], max_tokens=4,
                                  temperature=0)


def test_nfkc_folding_powers_is_named_at_intake_normalization(tmp_path: Path) -> None:
    with store(tmp_path / "t.duckdb", capture="hashes") as db:
        _ask(_server("--normalize", "nfkc"), MATH)
    found = findings(db, "intake_transform")
    assert found and found[0].stage == S.INTAKE_NORMALIZATION
    f = found[0]
    assert f.severity == "critical" and f.affected_share >= 0.99, f
    assert "superscript" in f.title and "NFKC" in f.title, f.title
    labels = {e.label: e.value for e in f.evidence}
    assert labels["superscript characters changed"] >= 5 and labels["fraction characters changed"] == 1
    assert labels["subscript characters changed"] >= 2
    # the whole diagnosis ranks it first: nothing else in this run is above info
    top = all_findings(db)[0]
    assert top.stage == S.INTAKE_NORMALIZATION, [(x.stage, x.severity, x.title) for x in all_findings(db)]


def test_anthropic_prompt_with_a_glued_joiner_under_strip(tmp_path: Path) -> None:
    import anthropic

    from llmtrace.adapters import instrument

    srv = _server("--strip-invisible")
    with store(tmp_path / "a.duckdb", capture="hashes") as db:
        a = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
        for i in range(4):
            a.messages.create(model=srv.model_id, max_tokens=4, messages=[
                {"role": "user", "content": f"Do not\u200bcancel order {i}; refund\u200bit instead."}])
    found = findings(db, "intake_transform")
    assert found and found[0].stage == S.INTAKE_NORMALIZATION and found[0].severity != "info"
    assert "joiner" in found[0].title and "strip" in found[0].title, found[0].title


def test_twins_no_flag_and_nothing_meaningful_to_fold_stay_at_most_info(tmp_path: Path) -> None:
    with store(tmp_path / "plain.duckdb", capture="hashes") as db:
        _ask(_server(), MATH)  # the default NFC composes; it folds no power or fraction
    assert findings(db, "intake_transform") == []
    with store(tmp_path / "wide.duckdb", capture="hashes") as db2:
        _ask(_server("--normalize", "nfkc"), ["Status of order ＡＢＣ-12?", "Is the ﬁle ready?", "Plain ascii text."])
    found = findings(db2, "intake_transform")
    assert all(f.severity == "info" for f in found), found
    with store(tmp_path / "ascii.duckdb", capture="hashes") as db3:
        _ask(_server("--normalize", "nfkc"), ["Where is order 12?", "Cancel order 7."])
    assert findings(db3, "intake_transform") == []


def test_classes_of_folds() -> None:
    assert dict(char_folds.fold_classes("x² 2⁵ 10⁻³", "NFKC")) == {"superscript": 4}
    assert dict(char_folds.fold_classes("½ ① Ⅻ H₂O", "NFKC")) == {"fraction": 1, "compat_digit": 2, "subscript": 1}
    assert dict(char_folds.fold_classes("ＡＢＣ ﬁ ™", "NFKC")) == {"full_width": 3, "ligature": 1, "compat": 1}
    assert char_folds.fold_classes("x² café", "NFC") == {}  # NFC folds no compatibility character
    assert dict(char_folds.stripped_classes("pay\u200bnow \u200bok", [3, 8])) == {"joiner_between_letters": 1,
                                                                                "invisible": 1}
    # a soft hyphen between two letters sits inside one word: stripping it glues nothing
    assert dict(char_folds.stripped_classes("inter\u00adnational", [5])) == {"invisible": 1}
    assert char_folds.decode(char_folds.encode({"full_width": 2, "superscript": 1})) == {"superscript": 1,
                                                                                        "full_width": 2}


def _tool_result_turns(srv: Any, text: str) -> None:
    import anthropic

    from llmtrace.adapters import instrument

    a = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
    for i in range(4):
        a.messages.create(model=srv.model_id, max_tokens=4, extra_body={"temperature": 0}, messages=[
            {"role": "user", "content": f"Can order O-{i} be refunded?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"tu_{i}", "name": "rules",
                                               "input": {"order": f"O-{i}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu_{i}",
                                          "content": [{"type": "text", "text": text.format(i=i)}]}]}])


def test_hidden_characters_in_a_tool_result_the_server_stripped_are_info(tmp_path: Path) -> None:
    # zero-width spaces beside spaces: the strip glues nothing and the model never reads them
    text = "Order O-{i}: not \u200beligible for \u200ba refund."
    with store(tmp_path / "s.duckdb", capture="hashes") as db:
        _tool_result_turns(_server("--strip-invisible"), text)
    found = [f for f in all_findings(db) if f.stage == S.SAFETY_INJECTION]
    assert found and all(f.severity == "info" for f in found), [(f.severity, f.title) for f in found]
    assert "stripped them" in found[0].title
    # the same tool output on a server that keeps them: they reach the model, unchecked
    with store(tmp_path / "k.duckdb", capture="hashes") as db2:
        _tool_result_turns(_server(), text)
    kept = [f for f in all_findings(db2) if f.stage == S.SAFETY_INJECTION]
    assert kept and kept[0].severity == "warning", [(f.severity, f.title) for f in kept]
