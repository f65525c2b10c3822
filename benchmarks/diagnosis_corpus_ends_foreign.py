"""Issue 35's early ends through ``llmtrace collect``: the same kinds as diagnosis_corpus_ends.py (a stop
string that also occurs inside the answer's own content), from apps traced by other projects'
instrumentations (OTel GenAI openai-v2, OpenInference, OpenLLMetry, LiteLLM), each with its twin.

Each instrumentation records a different part of the request: openai-v2 writes the stop strings
(``gen_ai.request.stop_sequences``), OpenInference keeps them in its invocation parameters, OpenLLMetry and
LiteLLM's callback may not name them at all, so there only the answer's end (an open JSON string, an
abbreviation left without its period) says a stop cut it. The tiny model's answers are pinned by a JSON schema
enum so the content the stop string meets is known; other domains and wording than the SDK half: a pharmacy's
dosing desk, a library's opening hours, a bike shop's repair queue, a lab's sample labels.
"""

from __future__ import annotations

import random
from typing import Any

from diagnosis_corpus_common import Case, no_app

PHARMACY = ("You answer the Brookfield pharmacy's dosing line. Quote the dose printed on the label, never change "
            "a prescription, and send anything about children under six to the pharmacist on duty. ") * 2
LIBRARY = ("You answer for the Elm Street library. Give opening hours from the timetable, say which branch holds a "
           "title, and never promise that a reserved book will arrive on a given day. ") * 2
BIKES = ("You run the repair queue of Spoke & Chain bikes. Give the ticket's place in the queue, the part on order, "
         "and never quote a price you were not given. ") * 2


def _enum(answer: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": [answer]}},
        "required": ["answer"], "additionalProperties": False}}}


def _call(system: str, user: str, answer: str, i: int, stop: list[str] | None, max_tokens: int = 40) -> dict[str, Any]:
    call: dict[str, Any] = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                            "max_tokens": max_tokens, "stream": i % 2 == 1, "response_format": _enum(answer)}
    if stop:
        call["stop"] = stop
    return call


def dose_mid_number(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Doses in decimals ("2.5 ml"), the app stopping at the first period for a one-sentence reply."""
    doses = ["Take 2.5 ml twice a day", "Take 0.5 tablet at night", "Take 7.5 mg with food", "Take 1.25 ml each morning",
             "Take 12.5 mg after breakfast", "Take 3.5 ml before bed"]
    return [_call(PHARMACY, f"What is the dose on label L-{40 + i}?", d, i, None if twin else ["."])
            for i, d in enumerate(doses)]


def hours_after_abbreviation(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """Opening hours written with abbreviations ("Mon.", "approx.", "e.g."); the twin stops on a blank line."""
    hours = ["Open Mon. to Fri. from nine", "Closes approx. at six on Saturdays", "Branches, e.g. Elm Street, open at ten",
             "Open Tue. and Thu. until eight", "Reopens approx. in two weeks", "Some titles, e.g. atlases, stay in"]
    return [_call(LIBRARY, f"When is branch B-{i} open?", h, i, ["\n\n"] if twin else ["."])
            for i, h in enumerate(hours)]


def comma_in_json_string(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A stop at "," for a short list reply; the JSON answers hold commas inside their strings."""
    queue = ["Ticket 41, third in line, chain on order", "Ticket 42, first in line, no parts needed",
             "Ticket 43, fifth in line, brake pads on order", "Ticket 44, second in line, tyre in stock",
             "Ticket 45, sixth in line, wheel on order"]
    return [_call(BIKES, f"Where is my repair, ticket {41 + i}?", q, i, None if twin else [","])
            for i, q in enumerate(queue)]


def semicolon_in_code_block(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    """A lab's script helper takes one shell command a reply (stop at ";"); the answers open a fenced block (```
    and ~~~) whose line chains two commands. Twin: a stop marker the answers never hold."""
    scripts = ["```sh\nmkdir -p runs/S-2041; cp raw/S-2041.csv runs/\n```", "~~~\ncd plates; ls -l\n~~~",
               "```bash\nexport LAB=harwell; make labels\n```", "~~~sh\nsort samples.txt; uniq -c\n~~~",
               "```\ngzip -k S-2045.fastq; rm tmp\n```"]
    system = BIKES.replace("repair queue of Spoke & Chain bikes", "sample desk of the Harwell lab")
    return [_call(system, f"Command for batch {2041 + i}?", cmd, i, ["<<END>>"] if twin else [";"], max_tokens=120)
            for i, cmd in enumerate(scripts)]


_STOP = ("gen.stop",)
ENDS_FOREIGN_CASES: tuple[Case, ...] = (
    Case("otelv2_stop_period_mid_dose", no_app, _STOP, via="otel-v2", calls=dose_mid_number),
    Case("openinference_stop_period_mid_dose", no_app, _STOP, via="openinference", calls=dose_mid_number),
    Case("openinference_stop_after_abbreviation", no_app, _STOP, via="openinference", calls=hours_after_abbreviation),
    Case("otelv2_stop_after_abbreviation", no_app, _STOP, via="otel-v2", calls=hours_after_abbreviation),
    Case("openllmetry_stop_comma_in_json_string", no_app, _STOP, via="openllmetry", calls=comma_in_json_string),
    Case("litellm_stop_comma_in_json_string", no_app, _STOP, via="litellm", calls=comma_in_json_string),
    Case("openllmetry_stop_period_mid_dose", no_app, _STOP, via="openllmetry", calls=dose_mid_number),
    Case("otelv2_stop_semicolon_in_code_block", no_app, _STOP, via="otel-v2", calls=semicolon_in_code_block),
    Case("litellm_stop_semicolon_in_code_block", no_app, _STOP, via="litellm", calls=semicolon_in_code_block),
)
