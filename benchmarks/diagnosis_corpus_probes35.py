"""Hold-out probes for issue 35's kinds, written after the corpus (session 35b): phrasings, positions, providers
and id kinds the other modules do not have, each with its clean twin.

- stop strings that fire inside content where the corpus never put them: after an ordinal ("1." of a numbered
  list), inside a web address or an e-mail, after a decimal comma ("3,5 kg"); and a stop string made of a word
  ("User", a role marker a chat app stops on) that fires mid-sentence far earlier than the same template's
  other answers, which only the "far earlier" rule can tell (served answers and foreign spans through collect);
- ``--normalize nfkc`` over a tool's result (powers) and an Anthropic system prompt given as text blocks; the
  twin folds only full-width digits and ligatures (drawing only: info at most);
- a loop whose arguments differ only in white space and key order against fan-out over ids that differ only
  in a suffix; the same error again and again through LiteLLM and LangChain (the conversation they send);
- a batch-invariant server whose planted cause is a per-request id, its clean twin only the setting's cost.

The tiny model's answers are pinned by a JSON schema enum, so the content a stop string meets is known.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

from diagnosis_corpus_common import POLICY, Case, Ctx, json_enum, no_app
from diagnosis_corpus_no_progress import errors_wire

_STOP = ("gen.stop",)


def _schema(answer: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"answer": {"type": "string", "enum": [answer]}},
            "required": ["answer"], "additionalProperties": False}


def _anthropic(c: Ctx, system: str, user: str, answer: str, stops: list[str], max_tokens: int = 60) -> None:
    c.anthropic.messages.create(
        model=c.model, max_tokens=max_tokens, system=system, messages=[{"role": "user", "content": user}],
        stop_sequences=stops,
        extra_body={"temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": _schema(answer)}}})


# ── stop strings inside content, new places ────────────────────────────────────────────────────────────────
STEPS = ["Do this: 1. unplug the router 2. wait ten seconds", "Try: 1. clear the cache 2. sign in again",
         "Steps: 1. open the lid 2. lift the filter out", "First: 1. note the serial 2. call the desk",
         "Order: 1. refund the fee 2. close the ticket"]


def period_after_ordinal_anthropic(c: Ctx, twin: bool) -> None:
    """A help desk stops at "." for one-sentence replies; every reply is a numbered list ("1. ...")."""
    for i, ans in enumerate(STEPS):
        _anthropic(c, POLICY, f"How do I fix fault F-{i}?", ans, ["\n\n"] if twin else ["."])


URLS = ["Fill in the form at returns.kestrel.example/start today", "Track it on www.parcelnet.example/track now",
        "Book a slot at depot.larkspur.example/slots this week", "Upload it to docs.kestrel.example/upload please",
        "See help.parcelnet.example/claims for the steps"]


def period_inside_web_address_stream(c: Ctx, twin: bool) -> None:
    """Streamed replies cut at "." for a one-liner; each names a web address."""
    for i, ans in enumerate(URLS):
        stream = c.openai.chat.completions.create(
            model=c.model, messages=[{"role": "system", "content": POLICY},
                                     {"role": "user", "content": f"Where do I send form {i}?"}],
            max_tokens=48, temperature=0, stream=True, response_format=json_enum(ans),
            stop=["<<END>>"] if twin else ["."])
        "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)


EMAILS = ["Write to claims@larkspur.example for a copy", "Mail returns@kestrel.example with the photos",
          "Send it to desk@parcelnet.example before noon", "Ask billing@larkspur.example to resend it",
          "Copy audit@kestrel.example on the reply"]


def at_sign_inside_email(c: Ctx, twin: bool) -> None:
    """A stop at "@" meant to cut a reply before a signature block ("@support"); the replies hold e-mails."""
    for i, ans in enumerate(EMAILS):
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"Who has document {i}?"}],
              max_tokens=40, response_format=json_enum(ans), **({} if twin else {"stop": ["@"]}))


WEIGHTS = ["Das Paket wiegt 3,5 kg und ist versichert", "Der Karton wiegt 12,25 kg netto",
           "Die Palette wiegt 410,5 kg mit Folie", "Der Umschlag wiegt 0,2 kg", "Die Kiste wiegt 7,75 kg leer"]


def decimal_comma_anthropic(c: Ctx, twin: bool) -> None:
    """A German desk stops at "," to keep the first clause; the weights use a decimal comma ("3,5 kg")."""
    for i, ans in enumerate(WEIGHTS):
        _anthropic(c, "Du beantwortest Fragen zu Sendungen. Antworte kurz.", f"Wie schwer ist Sendung {i}?", ans,
                   ["\n\n"] if twin else [","])


LETTER = ("Thank you for writing about your parcel. It left the depot this morning and the carrier expects to "
          "deliver it within two working days; you will get a message with a time slot the evening before.")
ROLE_WORD = ["Please ask the User to confirm the address", "The User should keep the receipt until it arrives",
             "Tell the User that the refund is on its way", "Remind the User to sign for the parcel"]


def role_word_far_earlier(c: Ctx, twin: bool) -> None:
    """A chat app stops on the role marker "User" (so the model never writes the user's next turn); the desk's
    replies name "the User" a few words in, so those end mid-sentence, far earlier than the same template's
    letters that run to their end. Twin: the marker as the template writes it ("\\nUser:"), never met."""
    for i in range(8):
        ans = ROLE_WORD[i // 2] if i % 2 == 0 else LETTER.replace("parcel", f"parcel {i}")
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"Any news on shipment S-{i}?"}],
              max_tokens=90, response_format=json_enum(ans), stop=["\nUser:"] if twin else ["User"])


def role_word_far_earlier_anthropic_stream(c: Ctx, twin: bool) -> None:
    """The same through Anthropic streams, the stop word "Human" mid-reply against whole letters."""
    words = ["Only a Human agent can approve this", "A Human will call you back", "Ask a Human at the desk",
             "Every claim goes to a Human first"]
    for i in range(8):
        ans = words[i // 2] if i % 2 == 0 else LETTER.replace("parcel", f"crate {i}")
        with c.anthropic.messages.stream(
                model=c.model, max_tokens=90, system=POLICY,
                messages=[{"role": "user", "content": f"Can you approve claim K-{i}?"}],
                stop_sequences=["\n\nHuman:"] if twin else ["Human"],
                extra_body={"output_config": {"format": {"type": "json_schema", "schema": _schema(ans)}}}) as st:
            "".join(st.text_stream)


SHELL_TASKS = ["make a folder named logs and enter it", "print the date and then the user name",
               "count the lines of a file named a.txt and then clear the screen", "go to /tmp and list it"]


def semicolon_in_tilde_block_smol(c: Ctx, twin: bool) -> None:
    """SmolLM2 shown one answer as a ~~~ block of two commands joined by ";", then asked for others; the app stops at
    ";" to take one command a reply. Twin: the same without the stop string."""
    for task in SHELL_TASKS:
        msgs = [{"role": "user", "content": "Show the shell commands to list files and print the folder."},
                {"role": "assistant", "content": "~~~sh\nls -l; pwd\n~~~"},
                {"role": "user", "content": f"Show the shell commands to {task}."}]
        c.ask(msgs, max_tokens=40, **({} if twin else {"stop": [";"]}))

# ── an intake step that changed what the prompt says: a tool's result, Anthropic system blocks ─────────────
def _tool_turn(call_id: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "crate_size", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result}]


def nfkc_tool_result_powers(c: Ctx, twin: bool) -> None:
    """A crate-size tool answers in powers ("2 m³", "10⁻² m"); the server folds them NFKC before the model reads
    the result. Twin: the same tool answering with full-width digits and ligatures (drawn otherwise, same
    meaning), on the same NFKC server."""
    for i in range(5):
        result = (f"Crate Ｃ-{i}: ２ m, ﬁtted lid, eﬀective load ３{i}0 kg" if twin
                  else f"Crate C-{i}: volume {i + 2} m³, wall 10⁻² m, load 3{i}0 kg")
        msgs = [{"role": "system", "content": POLICY}, {"role": "user", "content": f"Will crate C-{i} fit?"},
                *_tool_turn(f"call_{i}", {"crate": f"C-{i}"}, result)]
        c.ask(msgs, max_tokens=6)


def nfkc_anthropic_system_blocks(c: Ctx, twin: bool) -> None:
    """An Anthropic system prompt given as text blocks, the second holding a tolerance in powers and indices.
    Twin: the same blocks without them, on the default server."""
    for i in range(5):
        blocks = [{"type": "text", "text": POLICY},
                  {"type": "text", "text": f"Tolerance for part P-{i}: ±10⁻³ mm; use x₁ for the inner diameter."}]
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=blocks, extra_body={"temperature": 0},
                                    messages=[{"role": "user", "content": f"Is part P-{i} in tolerance?"}])


# ── loops vs fan-out: arguments alike but for white space and key order; ids that differ in a suffix ───────
def _dispatch_tools() -> Any:
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="invoice_lookup")
    def invoice_lookup(invoice: str, region: str = "eu") -> dict[str, str]:
        return {"invoice": invoice.strip(), "region": region, "status": "paid"}

    return tools


SUFFIXED = ["INV-2026-0417-A", "INV-2026-0417-B", "INV-2026-0417-C", "INV-2026-0417-D", "INV-2026-0417-E",
            "INV-2026-0417-F"]


def loop_spacing_key_order_vs_suffix_fan_out(c: Ctx, twin: bool) -> None:
    """Planted: each turn looks one invoice up five times, the arguments' JSON spaced and ordered differently each
    time (OpenAI tool-call shape). Twin: each turn looks up six invoices whose numbers differ only in the last
    letter, one a step, each answered with its own invoice."""
    from llmtrace.adapters.helpers import loops

    tools = _dispatch_tools()
    forms = ['{"invoice": "%s", "region": "eu"}', '{"region":"eu","invoice":"%s"}', '{ "invoice" : "%s" ,"region":"eu"}',
             '{"region": "eu",\n "invoice": "%s"}', '{"invoice":"%s","region":"eu"}']
    for turn in range(3):
        with loops.agent("billing"):
            for step in range(6 if twin else 5):
                inv = SUFFIXED[step] if twin else SUFFIXED[turn]
                raw = json.dumps({"invoice": inv, "region": "eu"}) if twin else forms[step] % inv
                tools.dispatch({"id": f"c{turn}{step}", "type": "function",
                                "function": {"name": "invoice_lookup", "arguments": raw}})
                c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"Is {inv} paid?"}])


def loop_same_order_vs_same_status_steps(c: Ctx, twin: bool) -> None:
    """Planted: each turn looks the customer's one invoice up five times, a model call between (it never reads
    the answer). Twin: each turn checks six different invoices one a step, the model asked between; every one is
    paid, so each lookup answers the same {"status": "paid", "region": "eu"}: the same answer to different
    questions, each read once, is work done, not a loop."""
    from llmtrace.adapters.helpers import loops

    tools = loops.Tools()

    @tools.register(name="invoice_status")
    def invoice_status(invoice: str) -> dict[str, str]:
        return {"status": "paid", "region": "eu"}

    for turn in range(3):
        with loops.agent("billing"):
            for step in range(6 if twin else 5):
                inv = SUFFIXED[step].replace("0417", f"05{turn}{step}") if twin else SUFFIXED[turn]
                c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"Is {inv} paid?"}])
                tools.dispatch({"id": f"v{turn}{step}", "name": "invoice_status", "arguments": {"invoice": inv}})
            c.ask([{"role": "user", "content": "Tell the customer."}])

# ── a batch-invariant server: a per-request id planted; the twin only the setting's expected cost ──────────
def invariant_unary_request_id(c: Ctx, twin: bool) -> None:
    """Bursts of ten unary calls and a few alone on a batch-invariant server; planted: a request id (hex) after
    the first sentence of the system prompt. Twin: the same traffic without it."""
    rng = random.Random(35)

    def one(i: int) -> None:
        tag = "" if twin else f"Request {rng.getrandbits(64):016x}. "
        system = POLICY[:120] + tag + POLICY[120:] + POLICY
        c.ask([{"role": "system", "content": system}, {"role": "user", "content": f"Claim C-{700 + i} status?"}],
              max_tokens=24)

    for burst in range(3):
        threads = [threading.Thread(target=one, args=(10 * burst + i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        one(100 + burst)



def nfkc_completions_prompt(c: Ctx, twin: bool) -> None:
    """The legacy completions API, a worksheet prompt holding powers and a fraction (planted: NFKC; twin: NFC)."""
    for i in range(5):
        c.openai.completions.create(model=c.model, max_tokens=6, temperature=0,
                                    prompt=f"Worksheet {i}: if a = {i + 2}, is a² + ½ more than 2⁴? Answer:")


def nfkc_responses_instructions(c: Ctx, twin: bool) -> None:
    """The Responses API, the instructions quoting an area in m² and a rate in 10⁻² (planted: NFKC; twin: NFC)."""
    for i in range(5):
        c.openai.responses.create(model=c.model, max_output_tokens=16, temperature=0,
                                  instructions=f"{POLICY}Warehouse bays are 40 m² each; damage is billed at 10⁻² of value.",
                                  input=f"How much floor does order O-{i} take?")


def nfkc_circled_steps_vs_wide_anthropic(c: Ctx, twin: bool) -> None:
    """An Anthropic system prompt numbering its steps with circled digits and a Roman numeral ("step ④", "form Ⅻ"),
    which NFKC folds to plain digits; the twin numbers them plainly and holds only full-width letters and a
    ligature (drawn otherwise, same meaning). Both on the NFKC server."""
    for i in range(5):
        system = (f"{POLICY}Claims follow form ＣＬ-{i}: step 4 checks the ﬁle, step 5 pays." if twin
                  else f"{POLICY}Claims follow form Ⅻ-{i}: step ④ checks the file, step ⑤ pays.")
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=system, extra_body={"temperature": 0},
                                    messages=[{"role": "user", "content": f"Which step is claim C-{i} at?"}])


def strip_joiner_in_tool_result_anthropic(c: Ctx, twin: bool) -> None:
    """An Anthropic tool_result whose text came from a web page with zero-width spaces standing between its words
    ("not", ZWSP, "eligible"); a server that strips invisible characters glues them. Twin: each beside a space."""
    for i in range(5):
        text = (f"Order O-{i}: not \u200beligible for \u200ba refund." if twin
                else f"Order O-{i}: not\u200beligible for\u200ba refund.")
        msgs = [{"role": "user", "content": f"Can order O-{i} be refunded?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"tu_{i}", "name": "refund_rules",
                                                   "input": {"order": f"O-{i}"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu_{i}",
                                              "content": [{"type": "text", "text": text}]}]}]
        c.anthropic.messages.create(model=c.model, max_tokens=6, system=POLICY, messages=msgs,
                                    extra_body={"temperature": 0})

# ── foreign: the same kinds through llmtrace collect ─────────────────────────────────────────────────────
def _fcall(system: str, user: str, answer: str, i: int, stop: list[str] | None, max_tokens: int = 90) -> dict[str, Any]:
    call: dict[str, Any] = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                            "max_tokens": max_tokens, "stream": i % 3 == 1, "response_format": json_enum(answer)}
    if stop:
        call["stop"] = stop
    return call


GARDEN = ("You answer for Fernhill Garden Centre. Say whether a plant is in stock, when a delivery van comes and "
          "never promise that a plant will survive a frost. ") * 2


def role_word_far_earlier_calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A garden centre's chat stops on "Customer" (its role marker); replies naming "the Customer" end a few words
    in, beside whole replies of the same template. Twin: the marker as written ("\\nCustomer:"), never met."""
    short = ["We will call the Customer when it arrives", "Ask the Customer for the order slip",
             "The Customer can collect it on Friday", "Give the Customer a frost cover"]
    long = ("The olive trees are back in stock in the large and medium pots, and the delivery van for your street "
            "runs on Tuesdays and Fridays between nine and one; we keep a plant for you for up to a week.")
    return [_fcall(GARDEN, f"Any olive trees for order O-{i}?", short[i // 2] if i % 2 == 0 else long.replace(
        "week", f"week, order O-{i}"), i, ["\nCustomer:"] if twin else ["Customer"]) for i in range(8)]


def ordinal_and_address_calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Numbered steps and web addresses, the app stopping at "." (twin: at a blank line)."""
    answers = STEPS[:3] + URLS[:3]
    return [_fcall(GARDEN, f"How do I do task T-{i}?", a, i, ["\n\n"] if twin else ["."], 48)
            for i, a in enumerate(answers)]


def spacing_loop_vs_suffix_fan_out_calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Agent tool spans: planted, one invoice looked up after every model call, five times a turn, its arguments'
    JSON spaced and ordered differently each time; twin, six invoices differing only in the last letter, one a
    step, each with its own result."""
    out: list[dict[str, Any]] = []
    for turn in range(3):
        for step in range(6 if twin else 5):
            inv = SUFFIXED[step] if twin else SUFFIXED[turn]
            args = {"invoice": inv, "region": "eu"} if step % 2 == 0 or twin else {"region": "eu", "invoice": inv}
            run = {"name": "invoice_lookup", "arguments": json.dumps(args, indent=None if twin else step % 3 or None),
                   "result": json.dumps({"invoice": inv, "status": "paid"})}
            out.append({"messages": [{"role": "system", "content": GARDEN}, {"role": "user", "content": f"Is {inv} paid?"}],
                        "max_tokens": 6, "stream": False, "turn": f"t{turn}", "tools_run": [run]})
    return out

def same_status_steps_calls(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Agent tool spans: planted, one invoice looked up after every model call, five times a turn; twin, six
    different invoices one a step, each answered with the same status (all paid)."""
    out: list[dict[str, Any]] = []
    for turn in range(3):
        for step in range(6 if twin else 5):
            inv = f"INV-05{turn}{step}-A" if twin else SUFFIXED[turn]
            run = {"name": "invoice_status", "arguments": json.dumps({"invoice": inv}),
                   "result": json.dumps({"status": "paid", "region": "eu"})}
            out.append({"messages": [{"role": "system", "content": GARDEN}, {"role": "user", "content": f"Is {inv} paid?"}],
                        "max_tokens": 6, "stream": False, "turn": f"t{turn}", "tools_run": [run]})
    return out

_LOOP = ("loop.tool_dispatch", "loop.budget")
PROBE_CASES: tuple[Case, ...] = (
    Case("stop_period_after_ordinal_anthropic", period_after_ordinal_anthropic, _STOP),
    Case("stop_period_inside_web_address_stream", period_inside_web_address_stream, _STOP),
    Case("stop_at_sign_inside_email", at_sign_inside_email, _STOP),
    Case("stop_decimal_comma_anthropic", decimal_comma_anthropic, _STOP),
    Case("stop_role_word_far_earlier", role_word_far_earlier, _STOP),
    Case("stop_role_word_far_earlier_anthropic_stream", role_word_far_earlier_anthropic_stream, _STOP),
    Case("stop_semicolon_in_tilde_block_smol", semicolon_in_tilde_block_smol, _STOP, "smol", "smol", model="smol"),
    Case("nfkc_tool_result_powers_vs_wide", nfkc_tool_result_powers, ("intake.normalization",), "nfkc", "nfkc"),
    Case("nfkc_anthropic_system_blocks", nfkc_anthropic_system_blocks, ("intake.normalization",), "nfkc",
         "default"),
    Case("loop_spacing_key_order_vs_suffix_fan_out", loop_spacing_key_order_vs_suffix_fan_out, _LOOP),
    Case("nfkc_completions_prompt", nfkc_completions_prompt, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_responses_instructions", nfkc_responses_instructions, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_circled_steps_vs_wide_anthropic", nfkc_circled_steps_vs_wide_anthropic, ("intake.normalization",),
         "nfkc", "nfkc"),
    Case("strip_joiner_in_tool_result_anthropic", strip_joiner_in_tool_result_anthropic, ("intake.normalization",),
         "strip_invisible", "strip_invisible"),
    Case("loop_same_order_vs_same_status_steps", loop_same_order_vs_same_status_steps, _LOOP),
    Case("invariant_unary_request_id", invariant_unary_request_id, ("cache.prefix_match", "intake.system_prompt"),
         "invariant", "invariant"),
)

PROBE_FOREIGN_CASES: tuple[Case, ...] = (
    Case("otelv2_stop_role_word_far_earlier", no_app, _STOP, via="otel-v2", calls=role_word_far_earlier_calls),
    Case("openinference_stop_role_word_far_earlier", no_app, _STOP, via="openinference",
         calls=role_word_far_earlier_calls),
    Case("litellm_stop_role_word_far_earlier", no_app, _STOP, via="litellm", calls=role_word_far_earlier_calls),
    Case("langchain_stop_role_word_far_earlier", no_app, _STOP, via="langchain", calls=role_word_far_earlier_calls),
    Case("openllmetry_stop_ordinal_and_address", no_app, _STOP, via="openllmetry", calls=ordinal_and_address_calls),
    Case("langchain_stop_ordinal_and_address", no_app, _STOP, via="langchain", calls=ordinal_and_address_calls),
    Case("otelv2_spacing_loop_vs_suffix_fan_out", no_app, _LOOP, via="otel-v2", calls=spacing_loop_vs_suffix_fan_out_calls),
    Case("openinference_spacing_loop_vs_suffix_fan_out", no_app, _LOOP, via="openinference",
         calls=spacing_loop_vs_suffix_fan_out_calls),
    Case("otelv2_loop_vs_same_status_steps", no_app, _LOOP, via="otel-v2", calls=same_status_steps_calls),
    Case("litellm_same_error_wire", no_app, _LOOP, via="litellm", calls=errors_wire),
    Case("langchain_same_error_wire", no_app, _LOOP, via="langchain", calls=errors_wire),
)
