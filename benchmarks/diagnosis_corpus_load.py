"""Cases of the diagnosis corpus that come from load and server flags: routing, KV memory, queueing and
shedding, speculation under load, batch-dependent answers, a foreign chat template.
"""

from __future__ import annotations

import random
import threading

from diagnosis_corpus_common import LONG_POLICY, POLICY, Ctx, concurrent, json_enum, user_turn


# ── serving: routing, memory, queueing, speculation, templates ───────────────────────────────
def shared_prefix_burst(c: Ctx, twin: bool) -> None:
    """A long shared prefix, calls one after another (the server's routing decides where it lands)."""
    for i in range(12):
        c.ask([{"role": "system", "content": LONG_POLICY + POLICY}, user_turn(i)])


def many_prefixes(c: Ctx, twin: bool) -> None:
    """Six different long prompts, each reused in turn: on a small KV pool they evict each other."""
    words = LONG_POLICY.split()
    bases = [" ".join(random.Random(k).sample(words, len(words))) for k in range(6)]
    for rnd in range(3):
        for k, b in enumerate(bases):
            c.ask([{"role": "system", "content": b}, user_turn(rnd * 6 + k)])


def queue_burst(c: Ctx, twin: bool) -> None:
    concurrent(c, 8, lambda i: [{"role": "system", "content": POLICY}, user_turn(i)], max_tokens=24)


def spec_under_load(c: Ctx, twin: bool) -> None:
    concurrent(c, 8, lambda i: [{"role": "system", "content": POLICY}, user_turn(i)], max_tokens=32)
    concurrent(c, 8, lambda i: [{"role": "system", "content": POLICY}, user_turn(i)], max_tokens=32)


def spec_under_load_shapes(c: Ctx, twin: bool) -> None:
    """Twelve structured answers at once: n-gram drafts from the prompt rarely match a constrained reply."""
    concurrent(c, 12, lambda i: [{"role": "user", "content": f"Route for parcel P-{300 + i} as JSON."}],
               max_tokens=40, response_format=json_enum(*(f"Depot {k} via hub {k + 4}, then van {k * 3}" for k in range(3))))


def spec_under_load_anthropic(c: Ctx, twin: bool) -> None:
    """Ten Anthropic calls at once, each with its own structured verdict: drafts guessed from the prompt miss."""
    errors: list[BaseException] = []

    def one(i: int) -> None:
        schema = {"type": "object", "properties": {"verdict": {"type": "string", "enum": [
            f"Lot {i} cleared by customs officer {k}, collect from shed {k + 2}" for k in range(2)]}},
            "required": ["verdict"], "additionalProperties": False}
        try:
            c.anthropic.messages.create(model=c.model, max_tokens=40, system=POLICY,
                                        messages=[{"role": "user", "content": f"Customs status of lot {i}?"}],
                                        extra_body={"output_config": {"format": {"type": "json_schema",
                                                                                 "schema": schema}}})
        except Exception as exc:  # noqa: BLE001  (counted below; a case must not hide a failed call)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def batch_greedy(c: Ctx, twin: bool) -> None:
    """One prompt at temperature 0, alone and inside a batch of others."""
    same = [{"role": "system", "content": POLICY}, {"role": "user", "content": "Summarise claim C-300 in one line."}]
    for _ in range(2):
        c.ask(same, max_tokens=12)
    concurrent(c, 10, lambda i: same if i == 0 else [{"role": "system", "content": POLICY}, user_turn(i)], max_tokens=12)
    concurrent(c, 10, lambda i: same if i == 3 else [{"role": "user", "content": "x" * (5 + i)}], max_tokens=12)


def foreign_template(c: Ctx, twin: bool) -> None:
    for i in range(6):
        c.ask([{"role": "system", "content": POLICY}, user_turn(i)])


def shed_burst(c: Ctx, twin: bool) -> None:
    concurrent(c, 10, lambda i: [{"role": "system", "content": POLICY}, {"role": "user", "content": f"Burst {i}."}],
               max_tokens=16)


# ── server flags the app never sees: a default length, a connection limit, one sequence per engine ─────────
def no_max_tokens_structured(c: Ctx, twin: bool) -> None:
    """Structured answers from an app that sets no max_tokens: the server's default decides where they end."""
    for i in range(8):
        c.openai.chat.completions.create(
            model=c.model, temperature=0,
            messages=[{"role": "system", "content": POLICY}, {"role": "user", "content": f"Where is crate C-{40 + i}?"}],
            response_format=json_enum(*(f"Crate {k} waits at bay {k + 7} of the north warehouse for the "
                                        f"afternoon van to depot {k * 5}" for k in range(3))))


def connection_burst(c: Ctx, twin: bool) -> None:
    """Twelve calls at once from a worker pool."""
    concurrent(c, 12, lambda i: [{"role": "system", "content": POLICY}, {"role": "user", "content": f"Ticket {i}?"}],
               max_tokens=20)
