"""Cases of the diagnosis corpus written in session 12 as hold-out probes: positions, value kinds and
passage layouts the other modules did not use (a clock in a tool description, the system as Anthropic
blocks with cache_control, an epoch ahead of a document in the user's turn, a tool list reshuffled per call,
a spelt-out date mid-system, passages as rule-separated paragraphs, bullets, inline JSON, blank-line
paragraphs), other ways to cut a structured answer, deploys that add a clock or tools, a compaction summary
sent as a developer message or a user turn; each with its clean twin. Kept in the corpus whether or not diagnose gets them right: two of
the layouts (no line names the passages) are still missed.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from diagnosis_corpus_common import LONG_POLICY, POLICY, TOOLS, Case, Ctx, json_enum, question, user_turn
from diagnosis_corpus_context import SKI, SKI_ASKS
from diagnosis_corpus_variants import _BRIEF, _TURNS

CACHE = ("cache.prefix_match",)
EVIDENCE = ("intake.evidence_formatting",)


def tools_stamp(c: Ctx, twin: bool) -> None:
    """A timestamp in the first tool's description (tools render before the system)."""
    for i in range(8):
        tools = json.loads(json.dumps(TOOLS))
        if not twin:
            at = dt.datetime(2026, 3, 1, 9, 0) + dt.timedelta(seconds=61 * i)
            tools[0]["function"]["description"] += f" Catalogue as of {at:%Y-%m-%d %H:%M:%S}."
        c.ask([{"role": "system", "content": LONG_POLICY}, user_turn(i)], tools=tools)


def anthropic_blocks_uuid(c: Ctx, twin: bool) -> None:
    """Anthropic: the system as blocks with cache_control; a request uuid in the first block."""
    rng = random.Random(3)
    for i in range(8):
        head = "Claims desk." if twin else f"Request {uuid.UUID(int=rng.getrandbits(128))}."
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=[
            {"type": "text", "text": head},
            {"type": "text", "text": LONG_POLICY, "cache_control": {"type": "ephemeral"}}],
            messages=[user_turn(i)])


def epoch_before_document(c: Ctx, twin: bool) -> None:
    """Epoch seconds in the one user message, ahead of a long pasted policy and the question."""
    for i in range(8):
        head = "" if twin else f"[ts={1764680000 + 97 * i}] "
        c.ask([{"role": "user", "content": head + "Policy follows.\n" + LONG_POLICY + "\n" + question(i)}])


def shuffled_tools(c: Ctx, twin: bool) -> None:
    """The tool list in another order on every call (a set or dict iterated upstream)."""
    rng = random.Random(5)
    for i in range(8):
        tools = list(TOOLS)
        if not twin:
            rng.shuffle(tools)
        c.ask([{"role": "system", "content": LONG_POLICY}, user_turn(i)], tools=tools)


def spelt_date_mid(c: Ctx, twin: bool) -> None:
    """'Today is Wednesday 2 December 2026, 9:15 AM.' in the middle of the system prompt."""
    half = len(LONG_POLICY) // 2
    for i in range(8):
        t = dt.datetime(2026, 12, 2, 9, 15) + dt.timedelta(minutes=7 * i)
        mid = "" if twin else f" Today is {t:%A %-d %B %Y}, {t:%-I:%M %p}. "
        c.ask([{"role": "system", "content": LONG_POLICY[:half] + mid + LONG_POLICY[half:]}, user_turn(i)])


def anthropic_tools_trace(c: Ctx, twin: bool) -> None:
    """Anthropic tools, a per-call trace id in the second tool's description."""
    rng = random.Random(9)
    for i in range(8):
        tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "input_schema": t["function"]["parameters"]} for t in TOOLS]
        if not twin:
            tools[1]["description"] += f" trace={rng.getrandbits(64):016x}"
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=LONG_POLICY, tools=tools,
                                    messages=[user_turn(i)])


# ── passages: the planted app gives them no ids; the twin labels them its own way ───────────────────────
TITLES = ["Wind closures", "Partner resort days", "Children's passes", "Lost property", "Night skiing"]
SKI_SYSTEM = "You answer guests of the Ardvane ski resort from the help centre."


def _ski(c: Ctx, body: Callable[[list[int]], str]) -> None:
    for i in range(6):
        c.ask([{"role": "system", "content": SKI_SYSTEM},
               {"role": "user", "content": f"{SKI_ASKS[i]}\n\n{body([(i + k) % 5 for k in range(3)])}"}])


def dashes_vs_titles(c: Ctx, twin: bool) -> None:
    """Rule lines between the passages, no line naming them; the twin heads each with its title."""
    _ski(c, lambda ks: "\n".join(f"### {TITLES[k]}\n{SKI[k]}" if twin else f"---\n{SKI[k]}" for k in ks))


def bullets_vs_urls(c: Ctx, twin: bool) -> None:
    """Bullets under 'Help centre:'; the twin gives each its source URL."""
    _ski(c, lambda ks: "Help centre:\n" + "\n".join(
        f"- {SKI[k]} (source: https://help.ardvane.example/articles/{400 + k})" if twin else f"- {SKI[k]}" for k in ks))


def json_vs_ids(c: Ctx, twin: bool) -> None:
    """A JSON list on the cue's line; the twin's objects carry ids."""
    _ski(c, lambda ks: "Documents: " + json.dumps(
        [{"id": f"doc-{k + 17}", "text": SKI[k]} if twin else {"text": SKI[k]} for k in ks]))


def blank_vs_dated_docs(c: Ctx, twin: bool) -> None:
    """Blank lines only, no line naming them; the twin: 'Document n (updated ...):' on each."""
    _ski(c, lambda ks: "\n\n".join(
        f"Document {k + 3} (updated 2026-01-0{k + 1}):\n{SKI[k]}" if twin else SKI[k] for k in ks))


# ── structured answers cut: other parameters and APIs ───────────────────────────────────────────────────
STOP = ("gen.stop", "safety.stop_reason")
REPLY = "Claim C-{i} is waiting for the signed delivery note and two photographs of the damaged pallet"


def max_completion_tokens_cut(c: Ctx, twin: bool) -> None:
    """max_completion_tokens (not max_tokens) too small for the structured reply; the twin has room."""
    for i in range(6):
        c.openai.chat.completions.create(model=c.model, temperature=0, max_completion_tokens=64 if twin else 9,
                                         messages=[{"role": "user", "content": f"Status of C-{i}?"}],
                                         response_format=json_enum(REPLY.format(i=i)))


def responses_schema_cut(c: Ctx, twin: bool) -> None:
    """The Responses API, text.format json_schema, max_output_tokens too small; the twin has room."""
    for i in range(6):
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": [REPLY.format(i=i)]}},
                  "required": ["answer"], "additionalProperties": False}
        c.openai.responses.create(model=c.model, input=f"Status of C-{i}?", max_output_tokens=64 if twin else 9,
                                  temperature=0, text={"format": {"type": "json_schema", "name": "answer",
                                                                  "schema": schema}})


def anthropic_forced_tool_cut(c: Ctx, twin: bool) -> None:
    """Anthropic, a forced tool call whose arguments max_tokens cuts; the twin has room."""
    tool = {"name": "record_status", "description": "Record a claim's status.", "input_schema": {
        "type": "object", "properties": {"claim": {"type": "string"}, "status": {
            "type": "string", "enum": ["open", "closed", "waiting for documents"]}}, "required": ["claim", "status"]}}
    for i in range(6):
        c.anthropic.messages.create(model=c.model, max_tokens=200 if twin else 7, tools=[tool],
                                    tool_choice={"type": "tool", "name": "record_status"},
                                    messages=[{"role": "user", "content": f"Record C-{i} as waiting."}])


# ── deploys ─────────────────────────────────────────────────────────────────────────────────────────────
def clock_since_v2(c: Ctx, twin: bool) -> None:
    """v2 puts the request's time at the top of the system prompt (the twin's v2 changed nothing)."""
    assert c.deploy is not None
    for name in ("v1", "v2"):
        c.deploy(name)
        for i in range(8):
            at = dt.datetime(2026, 12, 2, 10, 0) + dt.timedelta(seconds=83 * i)
            head = f"Now: {at:%H:%M:%S}\n" if name == "v2" and not twin else ""
            c.ask([{"role": "system", "content": head + POLICY * 3}, user_turn(i % 4)], max_tokens=4)


def tools_added_v2(c: Ctx, twin: bool) -> None:
    """v2 sends four tool definitions with every call (the twin's v2 changed nothing)."""
    assert c.deploy is not None
    for name in ("v1", "v2"):
        c.deploy(name)
        for i in range(8):
            kw: dict[str, Any] = {"tools": TOOLS} if name == "v2" and not twin else {}
            c.ask([{"role": "system", "content": POLICY * 2}, user_turn(i % 4)], max_tokens=4, **kw)


# ── compaction: the summary as a developer message, or as a user turn ───────────────────────────────────
def _compacted(c: Ctx, twin: bool, role: str) -> None:
    for n in range(3):
        o, p = 77340 + n, 318 + n
        first = {"role": "user", "content": f"Hi, question about my trip ({n})."}
        hist: list[dict[str, Any]] = [first, {"role": "assistant", "content": "Sure, go ahead."}]
        for q, a in [(q.format(o=o, p=p), a) for q, a in _TURNS]:
            hist.append({"role": "user", "content": q})
            c.ask([{"role": "system", "content": _BRIEF}, *hist])
            hist.append({"role": "assistant", "content": a})
        summary = (f"order NG-{o}, Edinburgh tour, booked by Priya Raman (priya.raman@example.org), paid "
                   f"£{p}.50 by card ending 7731, should be on the 19th." if twin
                   else "a customer wants the date of a tour booking changed; payment was made.")
        ask = {"role": "user", "content": "Which card did I pay with?"}
        kept = [{"role": "developer", "content": "Conversation so far: " + summary}] if role == "developer" else [
            {"role": "assistant", "content": "Sure, go ahead."}, {"role": "user", "content": "Earlier in this chat: " + summary},
            {"role": "assistant", "content": "Noted."}]
        c.ask([{"role": "system", "content": _BRIEF}, first, *kept, ask])


def developer_message_summary(c: Ctx, twin: bool) -> None:
    _compacted(c, twin, "developer")


def user_turn_summary(c: Ctx, twin: bool) -> None:
    _compacted(c, twin, "user")


PHRASING_CASES: tuple[Case, ...] = (
    Case("tools_stamp", tools_stamp, CACHE),
    Case("anthropic_blocks_uuid", anthropic_blocks_uuid, CACHE),
    Case("epoch_before_document", epoch_before_document, CACHE),
    Case("shuffled_tools", shuffled_tools, ("cache.prefix_match", "intake.context_ordering")),
    Case("spelt_date_mid_system", spelt_date_mid, CACHE),
    Case("anthropic_tools_trace_id", anthropic_tools_trace, CACHE),
    Case("passages_dashes_vs_titles", dashes_vs_titles, EVIDENCE),
    Case("passages_bullets_vs_urls", bullets_vs_urls, EVIDENCE),
    Case("passages_json_vs_ids", json_vs_ids, EVIDENCE),
    Case("passages_blank_vs_dated_docs", blank_vs_dated_docs, EVIDENCE),
    Case("max_completion_tokens_cut", max_completion_tokens_cut, STOP),
    Case("responses_schema_cut", responses_schema_cut, STOP),
    Case("anthropic_forced_tool_cut", anthropic_forced_tool_cut, STOP),
    Case("deploy_clock_since_v2", clock_since_v2, ("cache.prefix_match", "meters.cache_accounting",
                                                   "intake.system_prompt")),
    Case("deploy_tools_added_v2", tools_added_v2, ("meters.cache_accounting",)),
    Case("compaction_developer_message", developer_message_summary, ("loop.compaction",)),
    Case("compaction_user_turn_summary", user_turn_summary, ("loop.compaction",)),
)
