"""What the cases of the diagnosis corpus share (``diagnosis_corpus.py`` holds the table): the claims desk's
prompts and tools, the :class:`Ctx` a case runs against, the :class:`Case` row, and the helpers that make a
call's messages or fire calls at once. Imports nothing of the corpus, so each kind's module can import it.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

POLICY = (
    "You answer for Larkspur Freight's claims desk. Quote the claim number the customer gave, say which "
    "document is still missing, and never promise a payout date. If the customer is angry, apologise once. "
    "Escalate anything about hazardous goods to a human supervisor. Keep answers under eighty words. "
)
LONG_POLICY = POLICY * 3
EXAMPLES = [("Where is claim C-1?", "Waiting for the bill of lading."), ("Can you pay today?", "I cannot promise a date."),
            ("Claim C-7 status?", "Approved, payout pending."), ("Who handles acid spills?", "A supervisor will call you."),
            ("I sent the invoice.", "Thanks, it is attached to C-4."), ("Is C-9 closed?", "Yes, closed last week.")]
TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {"claim": {"type": "string"}}, "required": ["claim"]}}}
    for name, desc in (("claim_lookup", "Fetch one freight claim by its number, with status and missing documents."),
                       ("doc_upload_url", "Make a one-time upload link for a missing claim document."),
                       ("carrier_contact", "Return the carrier's claims contact for a shipment."),
                       ("payout_history", "List payouts already made on a claim, newest first."))]
QUESTIONS = ["My pallet arrived crushed, claim C-{n}.", "Did you get my photos for C-{n}?",
             "Why is C-{n} still open?", "What else do you need for C-{n}?", "Who do I call about C-{n}?"]


@dataclass
class Ctx:
    """What a case gets: SDK clients wrapped by instrument() and the served model's name."""

    openai: Any
    anthropic: Any
    model: str
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    # start tracing as another deploy of the same service (diagnosis.py's _run_app sets it)
    deploy: Callable[[str], None] | None = None

    def ask(self, messages: list[dict[str, Any]], max_tokens: int = 6, **kw: Any) -> Any:
        return self.openai.chat.completions.create(model=self.model, messages=messages, max_tokens=max_tokens,
                                                   temperature=kw.pop("temperature", 0), **kw)


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[Ctx, bool], None]
    expect: tuple[str, ...]  # stages that name the planted cause
    server: str = "default"  # server flag set (diagnosis.SERVERS) for the planted run
    twin_server: str | None = None  # for the twin, when the cause is a server flag
    capture: str = "hashes"  # the app's capture mode
    model: str = "tiny"  # "smol": needs the bundled SmolLM2-135M (--real-model), whose answers vary
    # a foreign case (diagnosis_foreign_corpus.py): the instrumentation, and the calls its app makes
    via: str | None = None
    calls: Callable[[bool, random.Random], list[dict[str, Any]]] | None = None
    content: bool = True  # false: the instrumentation's content capture off (no prompt text leaves the app)



def no_app(ctx: Ctx, twin: bool) -> None:
    """A foreign case's ``run``: its app's calls (``Case.calls``) go through diagnosis_foreign.py, never here."""
    raise RuntimeError("a foreign case runs its calls through diagnosis_foreign.py")

def question(i: int) -> str:
    return QUESTIONS[i % len(QUESTIONS)].format(n=100 + i)


def user_turn(i: int) -> dict[str, str]:
    return {"role": "user", "content": question(i)}


def stamp(i: int) -> dt.datetime:
    return dt.datetime(2026, 11, 30, 16, 5, 0) + dt.timedelta(seconds=37 * i + 1)


def concurrent(c: Ctx, n: int, messages: Callable[[int], list[dict[str, Any]]], max_tokens: int = 24,
               **kw: Any) -> None:
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            c.ask(messages(i), max_tokens=max_tokens, **kw)
        except Exception as exc:  # a 429 is part of some cases
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def json_enum(*values: str) -> dict[str, Any]:
    """Structured output with fixed answers: the tiny test model says exactly one of them."""
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": list(values)}},
        "required": ["answer"], "additionalProperties": False}}}
