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
