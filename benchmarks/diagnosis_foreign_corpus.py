"""The foreign half of the diagnosis corpus: apps instrumented by other projects (opentelemetry-
instrumentation-openai-v2, OpenLLMetry, OpenInference, LiteLLM's ``otel`` callback, langchain-openai under
OpenInference), calling ``llmtrace serve`` and exporting through the stock OTLP exporter to
``llmtrace collect``; ``diagnose`` reads the collector's store, which holds only what those packages
recorded (no llmtrace middleware, no server spans).

Each case is a list of calls (run by ``diagnosis_foreign.py`` in a process of its own). Other domains,
wording, id kinds and positions than the SDK half, the unit tests and the demo: a clinic's booking line,
a hotel concierge, a tax helpdesk; a request uuid, an ISO time with milliseconds, a user handle, epoch
milliseconds, a spelt-out date, streamed and buffered calls mixed.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import uuid
from typing import Any

from diagnosis_corpus import Case
from diagnosis_corpus_common import no_app
from diagnosis_corpus_ends_foreign import ENDS_FOREIGN_CASES
from diagnosis_corpus_harm import HARM_FOREIGN_CASES
from diagnosis_corpus_holdout import HOLDOUT_FOREIGN_CASES
from diagnosis_corpus_no_progress import NO_PROGRESS_FOREIGN_CASES
from diagnosis_corpus_probes35 import PROBE_FOREIGN_CASES
from diagnosis_corpus_variants import VARIANT_FOREIGN_CASES

CLINIC = ("You book appointments for the Moorfield Physiotherapy clinic. Offer the earliest free slot first, "
          "ask for the patient's date of birth before confirming, never give medical advice, and remind new "
          "patients to bring their referral letter. Sessions last forty-five minutes. ") * 3
HOTEL = ("You are the concierge desk of the Harbour Lantern hotel. Recommend restaurants within walking distance, "
         "quote opening hours only from the list you were given, offer to book a table, and mention that the "
         "spa closes at nine. Answer in two sentences at most. ") * 3
TAX = ("You help residents of Kellbridge with council tax questions. Name the band the resident gives, explain "
       "discounts for single occupants and students, point to the online form for direct debits, and never "
       "quote an amount you were not given. ") * 3
ASKS = ["Can I come in on {d}?", "Is there anything free after {d}?", "What about {d} in the afternoon?",
        "Could you move me to {d}?", "Do you have a slot on {d}?"]
DAYS = ["Monday", "the 14th", "next Friday", "Thursday morning", "the weekend", "the 3rd", "tomorrow", "Wednesday"]


def _ask(i: int) -> dict[str, str]:
    return {"role": "user", "content": ASKS[i % len(ASKS)].format(d=DAYS[i % len(DAYS)])}


def _call(messages: list[dict[str, Any]], i: int, max_tokens: int = 6, **kw: Any) -> dict[str, Any]:
    # every other call streamed: both paths of each instrumentation, in one run
    return {"messages": messages, "max_tokens": max_tokens, "stream": i % 2 == 1, **kw}


def request_uuid_top(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(8):
        head = "" if twin else f"request_id: {uuid.UUID(int=rng.getrandbits(128))}\n"
        out.append(_call([{"role": "system", "content": head + CLINIC}, _ask(i)], i))
    return out


def iso_millis_mid(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    t0 = dt.datetime(2026, 5, 19, 7, 42, 3, 125000)
    half = len(HOTEL) // 2
    out = []
    for i in range(8):
        stamp = "" if twin else f" [generated {(t0 + dt.timedelta(milliseconds=7919 * i)).isoformat(timespec='milliseconds')}Z]"
        out.append(_call([{"role": "system", "content": HOTEL[:half] + stamp + HOTEL[half:]}, _ask(i + 3)], i))
    return out


def user_handle_top(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    users = [f"@u_{rng.getrandbits(32):08x}" for _ in range(3)]
    out = []
    for i in range(12):
        who = users[i % 3]
        if twin:  # the handle where it belongs: in the user's own turn
            out.append(_call([{"role": "system", "content": TAX}, {"role": "user", "content": f"{who}: band C, "
                                                                   f"single occupant, question {i}"}], i))
        else:
            out.append(_call([{"role": "system", "content": f"Signed-in user {who}. " + TAX},
                              {"role": "user", "content": f"Band C, single occupant, question {i}"}], i))
    return out


def epoch_millis_top(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(8):
        head = "" if twin else f"ctx.ts={1779000000000 + 104729 * i} "
        out.append(_call([{"role": "system", "content": head + TAX.replace("Kellbridge", "Oakhurst")}, _ask(i)], i))
    return out


def spelt_date_mid(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    t0 = dt.datetime(2026, 3, 3, 14, 5, 9)
    text = CLINIC.replace("Moorfield", "Eastgate")
    cut = text.index("Sessions")
    out = []
    for i in range(8):
        when = "" if twin else f"Today is {(t0 + dt.timedelta(seconds=613 * i)):%A %d %B %Y, %H:%M:%S}. "
        out.append(_call([{"role": "system", "content": text[:cut] + when + text[cut:]}, _ask(i + 1)], i))
    return out


def session_token_mid(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Through LiteLLM to the server's Anthropic Messages API: a base64 session token mid-system prompt."""
    text = HOTEL.replace("Harbour Lantern", "Saltmarsh Inn")
    cut = text.index("offer to book")
    out = []
    for i in range(8):
        tok = "" if twin else f"(session {base64.urlsafe_b64encode(rng.randbytes(15)).decode()}) "
        out.append(_call([{"role": "system", "content": text[:cut] + tok + text[cut:]}, _ask(i + 4)], i))
    return out


HOTEL_TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {"venue": {"type": "string"}, "guests": {"type": "integer"}},
                   "required": ["venue"]}}}
    for name, desc in (("table_booking", "Reserve a table at a partner restaurant for a number of guests tonight."),
                       ("opening_hours", "Look up today's opening hours of a venue from the concierge list."),
                       ("taxi_quote", "Ask the partner taxi firm for a fare estimate to a venue."),
                       ("spa_slots", "List the free treatment slots in the hotel spa this evening."))]


def trace_id_in_tools(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A per-call trace id written into the third tool's description (the tools render before the system)."""
    out = []
    for i in range(8):
        tools = [dict(t, function=dict(t["function"])) for t in HOTEL_TOOLS]
        if not twin:
            tools[2]["function"]["description"] += f" (trace {rng.getrandbits(64):016x})"
        out.append(_call([{"role": "system", "content": HOTEL.replace("Harbour", "Quay")}, _ask(i + 2)], i,
                         tools=tools))
    return out


def shift_clock_top(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """For apps whose instrumentation sends no prompt text: a shift clock ahead of the tax helpdesk prompt."""
    t0 = dt.datetime(2026, 10, 12, 6, 30, 0) + dt.timedelta(seconds=rng.randrange(40000))  # per app: no warm cache
    out = []
    for i in range(8):
        head = "" if twin else f"Shift clock {(t0 + dt.timedelta(seconds=331 * i)):%H:%M:%S}. "
        out.append(_call([{"role": "system", "content": head + TAX.replace("Kellbridge", "Ashcombe")}, _ask(i + 6)], i))
    return out


def responses_ticket_top(twin: bool, rng: random.Random, streamed: tuple[int, ...] = (3, 6)) -> list[dict[str, Any]]:
    """The Responses API (instructions + input): a support ticket number ahead of the instructions."""
    out = []
    for i in range(8):
        head = "" if twin else f"Ticket #{rng.randrange(100000, 999999)} - "
        call = _call([{"role": "system", "content": head + CLINIC.replace("Moorfield", "Linden")}, _ask(i + 5)], i)
        out.append({**call, "api": "responses", "stream": i in streamed})
    return out


def responses_ticket_top_streamed(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """The same, every call streamed: OpenLLMetry 0.62 records Responses-API spans only for streams."""
    return responses_ticket_top(twin, rng, streamed=tuple(range(8)))


def json_words_cut(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    ask = ('Answer only with JSON of the form {"restaurant": "...", "opens": "HH:MM", "walk_minutes": 0} '
           "for a place to eat near the pier, request {n}.")
    # the twin has room for the JSON (the bundled model's runs past 9 tokens) and stops at a newline (the tiny
    # model's never ends on its own)
    return [_call([{"role": "user", "content": ask.replace("{n}", str(i))}], i,
                  **({"max_tokens": 64, "stop": ["\n"]} if twin else {"max_tokens": 9})) for i in range(8)]


def json_words_cut_streamed(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """The same, every call streamed: openai-v2 writes a stream's finish reason only in its output messages."""
    return [dict(c, stream=True) for c in json_words_cut(twin, rng)]


def words_clock_repeats(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A clock in words ahead of the prompt; the twin asks the same three questions again and again at
    temperature 0 (identical answers: OpenInference's response body differs on every call, its answer not)."""
    t0 = dt.datetime(2026, 12, 1, 9, 14) + dt.timedelta(seconds=rng.randrange(40000))
    text = HOTEL.replace("Harbour Lantern", "Kestrel Quay")
    asks = ["Where can we eat fish tonight?", "Is the spa open now?", "Can you book a table for two?"]
    out = []
    for i in range(9):
        when = t0 + dt.timedelta(seconds=197 * i)
        head = "" if twin else f"It is {when:%A} {when.day} {when:%B}, {when:%H:%M}. "
        out.append(_call([{"role": "system", "content": head + text}, {"role": "user", "content": asks[i % 3]}], i))
    return out


TAX_NOTES = ["Single occupants get a twenty-five percent discount on the council tax bill for their band.",
             "Full-time students are exempt when every adult in the property is a full-time student.",
             "Direct debits can be set up online on the first or the fifteenth of each month.",
             "Band C properties in Kellbridge pay the rate set by the council each April."]


def pasted_notes(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Retrieved notes pasted into the user turn, blank-line separated, one sent twice; the twin labels each with
    its id. Only the shape reaches the store (counts and scheme names), never the notes."""
    out = []
    for i in range(6):
        picked = [TAX_NOTES[(i + k) % 4] for k in range(3)]
        ctx = ("\n".join(f"[tax-{(i + k) % 4}] {n}" for k, n in enumerate(picked)) if twin
               else "\n\n".join([*picked, picked[0]]))
        out.append(_call([{"role": "system", "content": TAX.replace("Kellbridge", "Fernhollow")},
                          {"role": "user", "content": f"Relevant notes:\n{ctx}\n\nQuestion {i}: what do I pay?"}], i))
    return out


def resent_tool_call(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A concierge agent re-sending one availability lookup (its keys reordered, other whitespace) after every
    answer; the twin checks availability, books, and answers. Seen only in the input messages recorded."""
    same = ['{"restaurant": "Brine", "time": "19:30"}', '{"time":"19:30","restaurant":"Brine"}',
            '{ "restaurant" : "Brine" , "time" : "19:30" }', '{"time": "19:30",\n "restaurant": "Brine"}',
            '{"restaurant":"Brine","time":"19:30"}']
    walk = [("table_availability", same[0]), ("book_table", '{"restaurant": "Brine", "time": "19:30", "guests": 2}'),
            ("spa_hours", "{}")]
    out: list[dict[str, Any]] = []
    msgs: list[dict[str, Any]] = [{"role": "system", "content": HOTEL}, {"role": "user", "content": "A table for two at Brine tonight?"}]
    for k, (name, args) in enumerate(walk if twin else [("table_availability", a) for a in same]):
        out.append(_call(msgs, k))
        cid = f"call_{k}"
        msgs = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                           {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]},
                       {"role": "tool", "tool_call_id": cid, "content": "Brine: fully booked at 19:30."}]
    out.append(_call(msgs, len(out)))
    return out


def zero_width_in_system(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Zero-width spaces that come and go inside a word of the system prompt (a copy from a web CMS)."""
    out = []
    for i in range(8):
        zw = "" if twin else "\u200b" * (1 + i % 3)
        out.append(_call([{"role": "system", "content": TAX.replace("council tax", f"council{zw} tax")}, _ask(i)], i))
    return out



CLINIC_LEAFLETS = ["After a knee replacement, the first session is booked no sooner than ten days after discharge, "
                   "and the surgeon's letter must be sent ahead.",
                   "Patients on the hydrotherapy programme bring a towel and a padlock; the changing rooms open "
                   "fifteen minutes before each slot.",
                   "Missed appointments without a day's notice are charged half the session fee, waived once a year.",
                   "Shockwave therapy for heel pain is offered on Tuesdays only, by the senior physiotherapist.",
                   "Home visits are possible within six miles of the clinic for patients who cannot drive."]


def leaflet_note_labels(twin: bool, rng: random.Random, cue: str = "Clinic leaflets:") -> list[dict[str, Any]]:
    """Clinic leaflets retrieved for the patient's question; the twin labels them 'Note n: ', the planted app
    pastes the same leaflets blank-line apart, unlabelled."""
    out = []
    for i in range(6):
        picked = [CLINIC_LEAFLETS[(i + 2 * k) % 5] for k in range(3)]
        body = "\n\n".join(f"Note {k + 1}: {p}" if twin else p for k, p in enumerate(picked))
        out.append(_call([{"role": "system", "content": CLINIC.replace("Moorfield", "Birchgate")},
                          {"role": "user", "content": f"{_ask(i)['content']}\n\n{cue}\n\n{body}"}], i))
    return out


def leaflet_note_labels_cued(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """The same under a line naming the material ('Leaflet notes:')."""
    return leaflet_note_labels(twin, rng, cue="Leaflet notes:")


def patient_card_top(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A per-request patient card (a few hundred characters) heading the clinic's system prompt; the twin
    sends the same card after the booking rules."""
    text = CLINIC.replace("Moorfield", "Thornbury")
    out = []
    for i in range(8):
        nhs = f"{rng.randrange(400, 499)} {rng.randrange(100, 999)} {rng.randrange(1000, 9999)}"
        card = (f"Patient card: NHS no. {nhs}; referred by Dr {('Okafor', 'Lindqvist', 'Marsh', 'Ibarra')[i % 4]} "
                f"for {('lower back pain', 'a frozen shoulder', 'ankle rehab', 'post-op knee')[i % 4]}; "
                f"{2 + i % 5} sessions left of {6 + i % 3}; last seen {3 + 2 * i} days ago; prefers "
                f"{('mornings', 'late afternoons', 'Fridays')[i % 3]}; mobility aid: {('none', 'crutches')[i % 2]}.\n\n")
        system = text + "\n" + card if twin else card + text
        out.append(_call([{"role": "system", "content": system}, _ask(i + 2)], i))
    return out


# (id, instrumentation, calls, stages that name the cause, collector capture mode)
FOREIGN: tuple[tuple[str, str, Any, tuple[str, ...], str], ...] = (
    ("otelv2_request_uuid_top", "otel-v2", request_uuid_top, ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("openllmetry_iso_millis_mid", "openllmetry", iso_millis_mid, ("cache.prefix_match", "intake.system_prompt"),
     "hashes"),
    ("openinference_user_handle_top", "openinference", user_handle_top,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("litellm_epoch_millis_top", "litellm", epoch_millis_top, ("cache.prefix_match", "intake.system_prompt"),
     "hashes"),
    ("litellm_anthropic_session_token_mid", "litellm-anthropic", session_token_mid,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("langchain_spelt_date_mid", "langchain", spelt_date_mid, ("cache.prefix_match", "intake.system_prompt"),
     "hashes"),
    ("openinference_trace_id_in_tools", "openinference", trace_id_in_tools, ("cache.prefix_match",), "hashes"),
    ("openllmetry_trace_id_in_tools", "openllmetry", trace_id_in_tools, ("cache.prefix_match",), "hashes"),
    ("otelv2_trace_id_in_tools", "otel-v2", trace_id_in_tools, ("cache.prefix_match",), "hashes"),
    ("openinference_full_capture_uuid", "openinference", request_uuid_top,
     ("cache.prefix_match", "intake.system_prompt"), "full"),
    ("openinference_responses_ticket_top", "openinference", responses_ticket_top,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("openllmetry_responses_ticket_top", "openllmetry", responses_ticket_top_streamed,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("openllmetry_json_in_words_cut", "openllmetry", json_words_cut, ("gen.stop", "safety.stop_reason"), "full"),
    ("litellm_json_in_words_cut", "litellm", json_words_cut, ("gen.stop", "safety.stop_reason"), "hashes"),
    ("otelv2_json_in_words_cut", "otel-v2", json_words_cut, ("gen.stop", "safety.stop_reason"), "full"),
    ("otelv2_streamed_json_cut", "otel-v2", json_words_cut_streamed, ("gen.stop", "safety.stop_reason"), "hashes"),
    ("langchain_words_clock_repeats", "langchain", words_clock_repeats, ("cache.prefix_match", "intake.system_prompt"),
     "hashes"),
    ("openinference_words_clock_repeats", "openinference", words_clock_repeats,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
    ("openllmetry_pasted_notes_no_ids", "openllmetry", pasted_notes, ("intake.evidence_formatting",), "hashes"),
    ("litellm_pasted_notes_no_ids", "litellm", pasted_notes, ("intake.evidence_formatting",), "hashes"),
    ("openinference_resent_tool_call", "openinference", resent_tool_call, ("loop.budget", "loop.tool_dispatch"),
     "hashes"),
    ("openllmetry_zero_width_in_system", "openllmetry", zero_width_in_system, ("intake.normalization",), "hashes"),
    ("openllmetry_unlabelled_vs_note_labels", "openllmetry", leaflet_note_labels, ("intake.evidence_formatting",),
     "hashes"),
    ("openllmetry_unlabelled_vs_note_labels_cued", "openllmetry", leaflet_note_labels_cued,
     ("intake.evidence_formatting",), "hashes"),
    ("openinference_patient_card_top", "openinference", patient_card_top,
     ("cache.prefix_match", "intake.system_prompt"), "hashes"),
)


# the same apps with each package's content capture off (openai-v2's default): what token counts alone allow
NO_CONTENT: tuple[tuple[str, str, Any, tuple[str, ...], str], ...] = (
    ("openinference_hidden_inputs_clock", "openinference", shift_clock_top, ("cache.prefix_match",), "hashes"),
    ("otelv2_stock_no_content_clock", "otel-v2", shift_clock_top, ("cache.prefix_match",), "hashes"),
)

FOREIGN_CASES: tuple[Case, ...] = tuple(
    Case(cid, no_app, expect, capture=capture, via=via, calls=calls) for cid, via, calls, expect, capture in FOREIGN
) + tuple(Case(cid, no_app, expect, capture=capture, via=via, calls=calls, content=False)
          for cid, via, calls, expect, capture in NO_CONTENT) + VARIANT_FOREIGN_CASES + HOLDOUT_FOREIGN_CASES

# issue 35's agent tool spans from other instrumentations: loops vs fan-out (diagnosis_corpus_harm.py)
FOREIGN_CASES = FOREIGN_CASES + HARM_FOREIGN_CASES
# and their early ends, stop strings met inside content (diagnosis_corpus_ends_foreign.py)
FOREIGN_CASES = FOREIGN_CASES + ENDS_FOREIGN_CASES
# and loops that make no progress, on agent tool spans and in the recorded input messages (_no_progress.py)
FOREIGN_CASES = FOREIGN_CASES + NO_PROGRESS_FOREIGN_CASES
# and session 35b's hold-out probes of issue 35's kinds (diagnosis_corpus_probes35.py)
FOREIGN_CASES = FOREIGN_CASES + PROBE_FOREIGN_CASES
