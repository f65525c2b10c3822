"""Cases of the diagnosis corpus that break the prompt cache: volatile windows at many positions and of many
kinds (clocks, hex and uuid tags, epochs, per-customer ids, e-mails, counters and tokens in history,
shuffled examples), and the clean variants the cache is not to blame for.
"""

from __future__ import annotations

import base64
import uuid

from diagnosis_corpus_common import EXAMPLES, LONG_POLICY, POLICY, TOOLS, Ctx, question, stamp, user_turn


# ── cache: volatile windows at many positions and of many kinds ─────────────────────────────────
def clock_top(c: Ctx, twin: bool) -> None:
    for i in range(8):
        head = "" if twin else f"It is {stamp(i):%A %d %B %Y, %H:%M:%S} UTC. "
        c.ask([{"role": "system", "content": head + LONG_POLICY}, user_turn(i)])


def clock_local_full(c: Ctx, twin: bool) -> None:
    """Full capture, another clock format, the claims policy after a one-line greeting."""
    for i in range(8):
        when = "" if twin else f" Local time {stamp(i + 500):%H:%M:%S}, {stamp(i + 500):%d/%m/%Y}."
        c.ask([{"role": "system", "content": "Hello from the Larkspur desk." + when + " " + LONG_POLICY},
               {"role": "user", "content": f"Any news on parcel P-{70 + i}?"}])


def hex_mid_system(c: Ctx, twin: bool) -> None:
    for i in range(8):
        trace = uuid.UUID(int=c.rng.getrandbits(128)).hex[:20]
        mid = "" if twin else f"(routing tag {trace}) "
        c.ask([{"role": "system", "content": POLICY + mid + POLICY + POLICY}, user_turn(i)])


def uuid_in_tools(c: Ctx, twin: bool) -> None:
    for i in range(8):
        tools = [dict(t, function=dict(t["function"])) for t in TOOLS]
        if not twin:
            tools[2]["function"]["description"] += f" Request {uuid.UUID(int=c.rng.getrandbits(128))}."
        c.ask([{"role": "system", "content": POLICY}, user_turn(i)], tools=tools)


def epoch_before_examples(c: Ctx, twin: bool) -> None:
    shots = [m for q, a in EXAMPLES for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    for i in range(8):
        tail = "" if twin else f" Snapshot taken at {1764518400 + 61 * i}."
        c.ask([{"role": "system", "content": POLICY + tail}, *shots, user_turn(i)])


def per_customer_top(c: Ctx, twin: bool) -> None:
    customers = [f"CUS-{c.rng.getrandbits(24):06X}" for _ in range(4)]
    for i in range(12):
        who = customers[i % 4]
        if twin:
            c.ask([{"role": "system", "content": LONG_POLICY}, {"role": "user", "content": f"[{who}] {question(i)}"}])
        else:
            c.ask([{"role": "system", "content": f"customer_id={who}\n" + LONG_POLICY}, user_turn(i)])


def tenant_email(c: Ctx, twin: bool) -> None:
    tenants = ["ops@harbourline.example", "claims@ridgeway-haulage.example", "desk@northpier.example"]
    for i in range(9):
        t = tenants[i % 3]
        if twin:
            c.ask([{"role": "system", "content": LONG_POLICY}, {"role": "user", "content": f"{question(i)} (from {t})"}])
        else:
            c.ask([{"role": "system", "content": f"Account owner: {t}. " + LONG_POLICY}, user_turn(i)])


def shuffled_examples(c: Ctx, twin: bool) -> None:
    for i in range(8):
        shots = list(EXAMPLES)
        if not twin:
            c.rng.shuffle(shots)
        msgs = [{"role": "system", "content": POLICY}]
        for q, a in shots:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        c.ask([*msgs, user_turn(i)])


def counter_in_history(c: Ctx, twin: bool) -> None:
    for i in range(8):
        note = "Noted." if twin else f"Noted (ticket revision {41 + 3 * i})."
        c.ask([{"role": "system", "content": LONG_POLICY}, {"role": "user", "content": "I filed claim C-55 yesterday."},
               {"role": "assistant", "content": note + " " + POLICY}, user_turn(i)])


def token_in_history(c: Ctx, twin: bool) -> None:
    for i in range(8):
        tok = base64.urlsafe_b64encode(c.rng.randbytes(18)).decode()
        first = "Here is my upload session." if twin else f"Here is my upload session {tok}."
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": first + " " + POLICY},
               {"role": "assistant", "content": "Thanks, received."}, user_turn(i)])


def anthropic_clock(c: Ctx, twin: bool) -> None:
    for i in range(8):
        head = "" if twin else f"[{stamp(i).isoformat()}Z] "
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=head + LONG_POLICY,
                                    messages=[{"role": "user", "content": question(i)}])


def short_prompts(c: Ctx, twin: bool) -> None:
    for i in range(10):
        if twin:
            c.ask([{"role": "system", "content": LONG_POLICY}, {"role": "user", "content": f"ok {i}"}])
        else:
            c.ask([{"role": "user", "content": f"ok {i}"}])


def distinct_personas(c: Ctx, twin: bool) -> None:
    """A clean case either way: several different system prompts, each reused (not a volatile field); the
    planted variant adds a sequence number to the top of each."""
    personas = [f"Persona {k}: you handle {topic}. " + POLICY for k, topic in
                enumerate(("rail claims", "air freight", "cold chain", "customs holds", "damaged parcels"))]
    for i in range(15):
        p = personas[i % 5]
        c.ask([{"role": "system", "content": (p if twin else f"msg#{1000 + i} " + p)}, user_turn(i)])


# ── cache: a changing block (retrieved notes, a member profile) ahead of long fixed instructions ────────
LOANS = ("You are the loans assistant of the Fenwick Public Library. Check a title's availability before you "
         "promise it, explain the renewal rules (two renewals, none if someone holds the book), point members to "
         "the self-service kiosks for returns, and never reveal another member's loans. Late fees are twenty "
         "pence a day for adults and nothing for children. Keep replies under a hundred words. ") * 3
SHELF = ["a signed first edition kept in the reading room", "two copies on the ground floor, one on loan",
         "an audiobook edition with a waiting list of four", "a large-print copy at the Millbrook branch",
         "an e-book licence for three readers at once", "the only copy, sent for rebinding until Friday"]
TITLES = ["The Salt Road", "Winter Orchards", "A Field Guide to Moths", "Harbour Lights", "The Glass Cartographer",
          "Notes on Bread", "Rivers of the North", "The Quiet Engine"]


def _catalogue_notes(i: int) -> str:
    """Search hits for this member's question, about four hundred characters, different on every call."""
    hits = [f"- {TITLES[(i + k) % 8]} (ISBN 978-1-{40210 + 97 * i + k:05d}-{(3 * i + k) % 10}): "
            f"{SHELF[(i * 5 + k) % 6]}." for k in range(4)]
    return "Catalogue matches for this question:\n" + "\n".join(hits) + "\n\n"


def _member_profile(i: int) -> str:
    """A per-request member profile, a few hundred characters."""
    return (f"Member card LB-{0x3A1F00 + 7919 * i:06X}, home branch {('Millbrook', 'Castle Hill', 'Quayside')[i % 3]}, "
            f"joined {2009 + i % 14}. On loan: {TITLES[i % 8]} (due in {3 + i} days), {TITLES[(i + 3) % 8]} "
            f"(overdue {i % 4} days). Holds: {TITLES[(i + 5) % 8]}, position {1 + i % 6}. "
            f"Fees owed: {0.2 * (i % 4) * (1 + i % 3):.2f} GBP. Prefers e-mail reminders.\n\n")


LOAN_ASKS = ["Can I renew my books?", "Is my hold ready yet?", "Why do I owe a fee?", "Which branch has it?",
             "Can I borrow one more?", "When is my book due?", "Can my daughter use my card?", "Is the e-book free?"]


def notes_block_top(c: Ctx, twin: bool) -> None:
    """OpenAI: the catalogue matches of each question at the top of the system prompt, ahead of the loans
    rules; the twin sends the same matches after the rules."""
    for i in range(8):
        notes = _catalogue_notes(i)
        system = LOANS + "\n" + notes if twin else notes + LOANS
        c.ask([{"role": "system", "content": system}, {"role": "user", "content": LOAN_ASKS[i]}], max_tokens=4)


def profile_block_top_anthropic(c: Ctx, twin: bool) -> None:
    """Anthropic: the signed-in member's profile heads the system string; the twin puts it after the rules."""
    for i in range(8):
        profile = _member_profile(i)
        system = LOANS + "\n" + profile if twin else profile + LOANS
        c.anthropic.messages.create(model=c.model, max_tokens=4, system=system,
                                    messages=[{"role": "user", "content": LOAN_ASKS[(i + 3) % 8]}])
