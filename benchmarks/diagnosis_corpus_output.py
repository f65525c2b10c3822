"""Cases of the diagnosis corpus in generation and output: sampling, penalties, answers cut at the length cap,
and the safety and detokenization flags of the server the app never sees (late moderation, no hold-back
for non-Latin text, a stop window too short for the app's marker).
"""

from __future__ import annotations

from typing import Any

from diagnosis_corpus_common import POLICY, TOOLS, Ctx, json_enum, question, user_turn


# ── generation and output ────────────────────────────────────────────────────────────────────
def unseeded_sampling(c: Ctx, twin: bool) -> None:
    msgs = [{"role": "system", "content": POLICY}, {"role": "user", "content": "Give claim C-808 a one-word label."}]
    for _ in range(6):
        if twin:
            c.ask(msgs, max_tokens=8, temperature=0)
        else:
            c.ask(msgs, max_tokens=8, temperature=1.1, top_p=0.95)


def penalty_on_schema(c: Ctx, twin: bool) -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "claim", "schema": {
        "type": "object", "properties": {"claim": {"type": "string", "enum": ["C-1", "C-2", "C-3"]},
                                         "ok": {"type": "boolean"}},
        "required": ["claim", "ok"], "additionalProperties": False}}}
    for i in range(6):
        extra = {} if twin else {"extra_body": {"repetition_penalty": 1.5}}
        c.ask([{"role": "user", "content": f"Claim C-{i} as JSON."}], max_tokens=40, response_format=schema, **extra)


def json_in_words_cut(c: Ctx, twin: bool) -> None:
    """A cap of 10 cuts the JSON. The twin has room for it (48) and stops at a newline: the tiny model's text
    never ends on its own, and the bundled model's JSON (some 17 tokens) would be cut at 10 as well."""
    ask = "Reply only with a JSON object like {\"claim\": \"C-1\", \"missing\": [\"invoice\"]} for claim C-{n}."
    for i in range(8):
        c.ask([{"role": "user", "content": ask.replace("{n}", str(i))}], **({"max_tokens": 48, "stop": ["\n"]}
                                                                          if twin else {"max_tokens": 10}))


def tool_call_cut(c: Ctx, twin: bool) -> None:
    """The app takes whatever came back and carries the conversation on, finish reason unread."""
    for i in range(4):
        first = [{"role": "system", "content": POLICY}, user_turn(i)]
        r = c.ask(first, tools=TOOLS[:2], max_tokens=6, **({"tool_choice": "none", "stop": ["\n"]} if twin else {}))
        said = r.choices[0].message.content or "".join(t.function.arguments for t in r.choices[0].message.tool_calls or [])
        c.ask([*first, {"role": "assistant", "content": said or "(no text)"},
               {"role": "user", "content": "Thanks, and the next step?"}], max_tokens=6, stop=["\n"])


def anthropic_max_tokens(c: Ctx, twin: bool) -> None:
    """A cap of 8 cuts the JSON; the twin has room (64) and stops at a newline. Greedy on both: sampled at the
    Messages API's default temperature the bundled model rambles past any small cap now and then."""
    for i in range(6):
        kw: dict[str, Any] = {"max_tokens": 64, "stop_sequences": ["\n"]} if twin else {"max_tokens": 8}
        c.anthropic.messages.create(model=c.model, extra_body={"temperature": 0},
                                    messages=[{"role": "user", "content": f"Answer in JSON: status of claim C-{i}?"}], **kw)


# ── safety and detokenization: a server flag the app never sees ────────────────────────────
REPLIES = ["Claim C-{n} is approved; we will pay compensation for the crushed pallet next week",
           "We reviewed C-{n} with the carrier and a partial refund of the freight charge follows",
           "Claim C-{n} needs the delivery note before anything else can happen"]


def streamed_then_filtered(c: Ctx, twin: bool) -> None:
    """A streaming claims bot; the server's moderator objects to payout words a few tokens late."""
    for i in range(6):
        stream = c.openai.chat.completions.create(
            model=c.model, messages=[{"role": "system", "content": POLICY}, user_turn(i)], max_tokens=48,
            temperature=0, stream=True, response_format=json_enum(REPLIES[i % 3].format(n=200 + i)))
        "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)  # what the user read


def anthropic_stream_filtered(c: Ctx, twin: bool) -> None:
    for i in range(5):
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": [
            f"The surveyor agreed, so compensation for claim C-{330 + i} is on its way"]}},
            "required": ["answer"], "additionalProperties": False}
        with c.anthropic.messages.stream(model=c.model, max_tokens=48, system=POLICY,
                                         messages=[{"role": "user", "content": question(i)}],
                                         extra_body={"output_config": {"format": {"type": "json_schema",
                                                                                  "schema": schema}}}) as st:
            "".join(st.text_stream)


LABELS = ["配送済み・倉庫C-{n}", "📦 livré au dépôt {n}", "Доставлено на склад {n} ✅", "已签收 {n} 🚚"]


def non_latin_stream(c: Ctx, twin: bool) -> None:
    """Status labels in Japanese, French with emoji, Russian, Chinese, streamed to a UI."""
    for i in range(8):
        stream = c.openai.chat.completions.create(
            model=c.model, messages=[{"role": "user", "content": f"Status label for parcel {i}?"}], max_tokens=40,
            temperature=0, stream=True, response_format=json_enum(LABELS[i % 4].format(n=40 + i)))
        "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)


def non_latin_unary(c: Ctx, twin: bool) -> None:
    """The same kind of labels, not streamed: the final text carries the replacement characters."""
    for i in range(6):
        c.ask([{"role": "user", "content": f"Label {i}?"}], max_tokens=40,
              response_format=json_enum(LABELS[(i + 2) % 4].format(n=90 + i)))


NOTES = ["Bay {n} cleared for unloading ~~~ ops only: forklift 3 out of service",
         "Seal intact on trailer {n} ~~~ ops only: recheck the temperature log"]


def stop_marker_stream(c: Ctx, twin: bool) -> None:
    """The app stops the stream at its own marker ("~~~") so the ops-only tail never reaches the customer."""
    for i in range(6):
        stream = c.openai.chat.completions.create(
            model=c.model, messages=[{"role": "user", "content": f"Dock update {i}?"}], max_tokens=48,
            temperature=0, stream=True, stop=["~~~"], response_format=json_enum(NOTES[i % 2].format(n=12 + i)))
        "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)


def stop_marker_anthropic(c: Ctx, twin: bool) -> None:
    for i in range(5):
        schema = {"type": "object", "properties": {"note": {"type": "string", "enum": [
            f"Driver {i} checked in at gate B [[internal]] blacklist review pending"]}},
            "required": ["note"], "additionalProperties": False}
        with c.anthropic.messages.stream(model=c.model, max_tokens=48, stop_sequences=["[[internal]]"],
                                         messages=[{"role": "user", "content": f"Gate log {i}?"}],
                                         extra_body={"output_config": {"format": {"type": "json_schema",
                                                                                  "schema": schema}}}) as st:
            "".join(st.text_stream)
