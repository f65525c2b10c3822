"""Cases of the diagnosis corpus written in session 12 as hold-out probes: positions, value kinds and
passage layouts the other modules did not use (a clock in a tool description, the system as Anthropic
blocks with cache_control, an epoch ahead of a document in the user's turn, a tool list reshuffled per call,
a spelt-out date mid-system, passages as rule-separated paragraphs, bullets, inline JSON, blank-line
paragraphs), each with its clean twin. Kept in the corpus whether or not diagnose gets them right: two of
the layouts (no line names the passages) are still missed.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Callable

from diagnosis_corpus_common import LONG_POLICY, TOOLS, Case, Ctx, question, user_turn
from diagnosis_corpus_context import SKI, SKI_ASKS

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
    """Rule lines between the passages, no line naming them; the twin heads each with its title. (Missed.)"""
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
    """Blank lines only, no line naming them; the twin: 'Document n (updated ...):' on each. (Missed.)"""
    _ski(c, lambda ks: "\n\n".join(
        f"Document {k + 3} (updated 2026-01-0{k + 1}):\n{SKI[k]}" if twin else SKI[k] for k in ks))


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
)
