"""A changing block ahead of fixed text: an app that puts a few hundred characters that differ on every call
(retrieved notes, a per-user profile) at the top of its system prompt, ahead of a long fixed instruction
block, breaks the prefix cache on every call. `llmtrace diagnose` must name that (the block, where it sits,
the fixed text behind it, a move as the fix), whatever the block's size, through the OpenAI SDK and the
Anthropic SDK (system as a string and as blocks), and with the block in the first user message instead.

Its clean twins send different content legitimately: different questions after a fixed system prompt,
different documents after it, or the changing block already at the end; they get nothing above info.

Real parts only: the tiny model served in-process, the official SDKs wrapped by ``instrument()``,
``llmtrace diagnose --json``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

import llmtrace
from llmtrace.cli import main

FIXED = ("You answer for Brackwater Marine's warranty desk. Ask for the hull number and the date of purchase, "
         "name the part of the warranty that applies, and never promise a repair date. If the owner mentions "
         "water in the bilge, tell them to haul out before anything else. Keep answers under ninety words. ") * 4
WORDS = ("impeller gasket anode bilge pump transom bracket gelcoat crack outdrive bellows throttle cable seized "
         "rudder bearing leak bracket invoice dealer survey moisture osmosis blister keel bolt").split()
CALLS = 8


def _notes(rng: random.Random, size: int) -> str:
    """Retrieved notes of about ``size`` characters (a fifth more or less), different on every call."""
    n = size + rng.randint(-size // 5, size // 5)
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < n:
        lines.append(" ".join(rng.choice(WORDS) for _ in range(9)).capitalize() + ".")
    return "Notes retrieved for this owner:\n" + "\n".join(lines)[:n] + "\n\n"


def _question(i: int) -> str:
    return f"My boat HN-{3100 + 7 * i} has a problem, is it covered? Day {i + 1} of waiting."


Messages = Callable[[random.Random, int], dict[str, Any]]  # the request body of call i


def _openai(srv: Any, body: Messages, rng: random.Random) -> None:
    c = live.client(srv)
    for i in range(CALLS):
        c.chat.completions.create(model="tiny", temperature=0, max_tokens=2, **body(rng, i))


def _anthropic(srv: Any, body: Messages, rng: random.Random) -> None:
    import anthropic

    from llmtrace.adapters import instrument

    c = instrument(anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0))
    for i in range(CALLS):
        c.messages.create(model="tiny", max_tokens=2, **body(rng, i))


def _cache_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, sdk: str, body: Messages,
                    capture: str) -> list[dict[str, Any]]:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    llmtrace.init(db=db, service_name="warranty-desk", capture=capture, strict=True)
    try:
        # notes of its own per case: the server's prefix cache and the middleware's recent prompts outlive a test
        (_openai if sdk == "openai" else _anthropic)(srv, body, random.Random(case))
    finally:
        llmtrace.shutdown()
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    return [f for f in found if f["stage"] == "cache.prefix_match" or "cache.prefix_match" in f.get("stages", ())]


def _system_top(size: int) -> Messages:
    return lambda rng, i: {"messages": [{"role": "system", "content": _notes(rng, size) + FIXED},
                                        {"role": "user", "content": _question(i)}]}


PLANTED: dict[str, tuple[str, Messages, str, str]] = {
    # id: (sdk, request body, capture, the segment the finding names)
    "system-top-150": ("openai", _system_top(150), "hashes", "system"),
    "system-top-600": ("openai", _system_top(600), "hashes", "system"),
    "system-top-2000": ("openai", _system_top(2000), "hashes", "system"),
    "system-top-600-full": ("openai", _system_top(600), "full", "system"),
    "anthropic-system-string": ("anthropic", lambda rng, i: {
        "system": _notes(rng, 500) + FIXED, "messages": [{"role": "user", "content": _question(i)}]}, "hashes", "system"),
    "anthropic-system-blocks": ("anthropic", lambda rng, i: {
        "system": [{"type": "text", "text": _notes(rng, 500)}, {"type": "text", "text": FIXED}],
        "messages": [{"role": "user", "content": _question(i)}]}, "hashes", "system"),
    # the block and the instructions in a first user message, the question asked after them
    "first-user-message": ("openai", lambda rng, i: {"messages": [
        {"role": "user", "content": _notes(rng, 700) + FIXED},
        {"role": "assistant", "content": "Understood."},
        {"role": "user", "content": _question(i)}]}, "hashes", "history"),
    # one user message: block, instructions, question (the text is needed to see the instructions recur)
    "one-user-message-full": ("openai", lambda rng, i: {"messages": [
        {"role": "user", "content": _notes(rng, 700) + FIXED + "\n\n" + _question(i)}]}, "full", "user"),
}


# With hashes capture the analysis sees the text after the first difference only through the middleware's
# divergence window (llmtrace.divergence.*). Since edb2e05 a window whose text changes again before an identical
# ending of 256 chars or more runs to that ending (class 'fields'), so a block that starts with a value of its
# own (an id, a date) is found. A question after the instructions in the same message leaves no identical
# ending: the fixed text behind the block is found from the content-defined pieces each long segment records
# (tracer/record/prompt_segments.py ``pieces``, analyzers/cache/prompt_compare.py ``piece_run``).
PLANTED.update({
    "id-ahead-of-the-block-hashes": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": f"Owner record OW-{rng.randrange(10**5):05d}, hull HN-{3100 + 7 * i}.\n"
                                      + _notes(rng, 500) + FIXED},
        {"role": "user", "content": _question(i)}]}, "hashes", "system"),
    "id-ahead-of-the-block-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": f"Owner record OW-{rng.randrange(10**5):05d}, hull HN-{3100 + 7 * i}.\n"
                                      + _notes(rng, 500) + FIXED},
        {"role": "user", "content": _question(i)}]}, "full", "system"),
    "one-user-message-hashes": ("openai", lambda rng, i: {"messages": [
        {"role": "user", "content": _notes(rng, 700) + FIXED + "\n\n" + _question(i)}]}, "hashes", "user"),
})


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_changing_block_ahead_of_fixed_text_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       case: str) -> None:
    sdk, body, capture, segment = PLANTED[case]
    found = [f for f in _cache_findings(tmp_path, capsys, case, sdk, body, capture) if f["severity"] != "info"]
    assert found, f"{case}: no cache finding"
    f = found[0]
    assert f["stage"] == "cache.prefix_match" and f["severity"] in ("warning", "critical"), (f["severity"], f["title"])
    assert "changing block" in f["title"] and f"of the {segment}" in f["title"], f["title"]
    assert "Move the changing block after the fixed text" in f["next_check"], f["next_check"]
    assert "intake.context_ordering" in f["stages"], f["stages"]
    if segment == "system":
        assert "intake.system_prompt" in f["stages"], f["stages"]


CLEAN: dict[str, tuple[str, Messages, str]] = {
    "different-questions": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED}, {"role": "user", "content": _question(i) + " " + _notes(rng, 150)}]},
        "hashes"),
    "documents-after-fixed-system": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED}, {"role": "user", "content": _notes(rng, 1500) + _question(i)}]}, "hashes"),
    "documents-after-fixed-system-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED}, {"role": "user", "content": _notes(rng, 1500) + _question(i)}]}, "full"),
    "block-at-end-of-system": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED + "\n" + _notes(rng, 600)}, {"role": "user", "content": _question(i)}]},
        "hashes"),
    "block-at-end-of-system-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED + "\n" + _notes(rng, 600)}, {"role": "user", "content": _question(i)}]},
        "full"),
    "anthropic-block-at-end": ("anthropic", lambda rng, i: {
        "system": [{"type": "text", "text": FIXED}, {"type": "text", "text": _notes(rng, 600)}],
        "messages": [{"role": "user", "content": _question(i)}]}, "hashes"),
    "block-in-last-user-message-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED}, {"role": "user", "content": _question(i) + "\n" + _notes(rng, 900)}]},
        "full"),
}


PERSONAS = [f"You are the {k} desk of Brackwater Marine. " + " ".join(WORDS[(3 * n + j) % len(WORDS)] for j in range(60))
            + ".\n\n" for n, k in enumerate(("hull", "engine", "rigging", "trailer"))]
_RNG = random.Random("passages and a document")
KB = [" ".join(_RNG.choice(WORDS) for _ in range(55)).capitalize() + "." for _ in range(8)]
DOC = " ".join(_RNG.choice(WORDS) for _ in range(500))


def _edited(rng: random.Random, i: int) -> str:
    """The same long document, a different stretch of it rewritten each call (an editor's drafts)."""
    at = rng.randrange(0, len(DOC) - 400)
    return DOC[:at] + _notes(rng, 200) + DOC[at + 200:]


# different content that shares long text across calls, which is no block ahead of fixed text
CLEAN.update({
    # a few long personas ahead of the instructions, each reused: one miss per persona, hits after that
    "reused-personas": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": PERSONAS[i % 4] + FIXED}, {"role": "user", "content": _question(i)}]}, "hashes"),
    "reused-personas-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": PERSONAS[i % 4] + FIXED}, {"role": "user", "content": _question(i)}]}, "full"),
    # retrieved passages that recur at shifted places (a sliding top three): shared text, another each time
    "shifted-passages-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED},
        {"role": "user", "content": "\n\n".join(KB[(i + k) % 8] for k in range(3)) + "\n\n" + _question(i)}]}, "full"),
    # one document edited in a different place each call
    "edited-document-full": ("openai", lambda rng, i: {"messages": [
        {"role": "system", "content": FIXED},
        {"role": "user", "content": _edited(rng, i) + "\n\nFix the spelling."}]}, "full"),
})


@pytest.mark.parametrize("case", list(CLEAN))
def test_different_content_after_the_fixed_text_is_not_a_cache_finding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    sdk, body, capture = CLEAN[case]
    found = [f for f in _cache_findings(tmp_path, capsys, case, sdk, body, capture) if f["severity"] != "info"]
    assert not found, [(f["severity"], f["title"]) for f in found]


@pytest.mark.parametrize("moved", [True, False], ids=["moved-up", "kept-at-end"])
def test_a_deploy_that_moves_the_block_up_fails_check_and_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   moved: bool) -> None:
    """v1 sends the notes after the instructions (more calls); v2 puts them on top (fewer calls, so v1's hits
    outnumber them: the block is weighed against v2's passes): `llmtrace check` fails v2 on the hit rate and
    diagnose names the block since v2; the twin's v2 changed nothing."""
    db = tmp_path / "t.duckdb"
    srv = live.server()
    rng = random.Random(f"deploy {moved}")
    for deploy, calls in (("v1", 12), ("v2", 6)):
        top = moved and deploy == "v2"
        with live.store(db, deploy=deploy, capture="hashes"):
            c = live.client(srv)
            for i in range(calls):
                notes = _notes(rng, 500)
                system = notes + FIXED if top else FIXED + "\n" + notes
                c.chat.completions.create(model="tiny", temperature=0, max_tokens=2, messages=[
                    {"role": "system", "content": system}, {"role": "user", "content": _question(i)}])
    capsys.readouterr()
    rc = main(["check", "--db", str(db), "--deploy", "v2", "--baseline-deploy", "v1"])
    report = capsys.readouterr().out
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = [f for f in json.loads(capsys.readouterr().out)["findings"]
             if f["stage"] == "cache.prefix_match" and f["severity"] != "info"]
    if not moved:
        assert rc == 0 and not found, (report, [f["title"] for f in found])
        return
    assert rc == 1 and "FAIL cache hit rate" in report, report
    # (check explains the fall by cost_after_deploy's finding: the system prompt's hash changed on every call at
    # both deploys, so it names no segment that moved, and the two findings keep separate causes)
    blocks = [f["title"] for f in found if "changing block" in f["title"]]
    assert len(blocks) == 1 and "of the system prompt since deploy v2" in blocks[0], [f["title"] for f in found]


# A single value (a clock, a request id) ahead of the fixed instructions in the user's own message is the
# same mistake as a block; the title names what the value is, from the text (full) or from the value the
# middleware lists for a hashed segment (its ``fields``), and where the fixed text behind it starts.
VALUE_AHEAD: dict[str, tuple[Callable[[random.Random, int], str], str, str]] = {
    # (a value of the case's own: the shared server's prefix cache outlives a test)
    "epoch-hashes": (lambda rng, i: f"[ts={1764680000 + rng.randrange(10**6)}] ", "hashes", "epoch"),
    "epoch-full": (lambda rng, i: f"[ts={1764680000 + rng.randrange(10**6)}] ", "full", "epoch"),
    "uuid-hashes": (lambda rng, i: f"req {rng.getrandbits(128):032x}: ", "hashes", "uuid"),
}


@pytest.mark.parametrize("case", list(VALUE_AHEAD))
def test_a_value_ahead_of_the_instructions_in_the_users_message_is_named_by_its_kind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    head, capture, kind = VALUE_AHEAD[case]
    body: Messages = lambda rng, i: {"messages": [  # noqa: E731
        {"role": "user", "content": head(rng, i) + "Policy follows.\n" + FIXED + "\n\n" + _question(i)}]}
    found = [f for f in _cache_findings(tmp_path, capsys, case, "openai", body, capture) if f["severity"] != "info"]
    assert found, f"{case}: no cache finding"
    title = found[0]["title"]
    assert title.startswith(f"{'An' if kind[0] in 'aeio' else 'A'} {kind} at char ") and "of the user (ahead of ~" in title, title


def test_a_tool_list_in_another_order_each_call_is_named_as_tools(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tools = [{"type": "function", "function": {"name": f"hull_{w}", "description": f"Look up the {w} of a hull by "
              "its number, with the dealer's notes and the warranty part that covers it.",
              "parameters": {"type": "object", "properties": {"hull": {"type": "string"}}}}}
             for w in ("owner", "survey", "engine", "invoice", "repairs")]

    def body(rng: random.Random, i: int) -> dict[str, Any]:
        return {"tools": rng.sample(tools, len(tools)),
                "messages": [{"role": "system", "content": FIXED}, {"role": "user", "content": _question(i)}]}
    found = [f for f in _cache_findings(tmp_path, capsys, "shuffled tools", "openai", body, "hashes")
             if f["severity"] != "info"]
    assert found and found[0]["title"].startswith("Tools in a different order each call"), found[:1]
    assert "intake.context_ordering" in found[0]["stages"], found[0]["stages"]
