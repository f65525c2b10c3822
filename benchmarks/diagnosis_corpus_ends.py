"""Cases of the diagnosis corpus for issue 35's two silent kinds: an answer ended by a stop string that also
occurs inside its own content (finish reason "stop", nothing else to see), and an intake step on the server
that changed what the prompt says before the model read it (``--normalize nfkc``, ``--strip-invisible``).

The tiny model's answers are pinned by a JSON schema enum, so the content a stop string meets is known; the
bundled SmolLM2 writes its own code block for the newline case. Each case has its twin: the same app without the
stop string (or with one that never occurs in an answer), or the same prompts on a server without the flag,
or the flag over text with nothing meaningful to fold.
"""

from __future__ import annotations

from typing import Any

from diagnosis_corpus_common import POLICY, Case, Ctx, json_enum

ENDS_SERVERS: dict[str, list[str]] = {
    "nfkc": ["--normalize", "nfkc"],
    "strip_invisible": ["--strip-invisible"],
}


# ── a stop string inside the answer's content ─────────────────────────────────────────────────
def _schema(answer: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"answer": {"type": "string", "enum": [answer]}},
            "required": ["answer"], "additionalProperties": False}


def period_mid_number(c: Ctx, twin: bool) -> None:
    """A route planner that stops at the first sentence's period: every distance is a decimal."""
    for i, km in enumerate(("7.5", "12.25", "3.8", "41.0", "9.75", "0.6")):
        kw: dict[str, Any] = {} if twin else {"stop": ["."]}
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"How far to depot D-{i}?"}],
              max_tokens=40, response_format=json_enum(f"Depot D-{i} is {km} km from the yard"), **kw)


def version_number_stream(c: Ctx, twin: bool) -> None:
    """Release notes streamed to a chat window, cut at "." for a one-line summary; each names a version."""
    for i in range(5):
        kw: dict[str, Any] = {"stop": ["\n\n"]} if twin else {"stop": [".", "\n\n"]}
        stream = c.openai.chat.completions.create(
            model=c.model, messages=[{"role": "user", "content": f"Summarise release {i} in one line."}],
            max_tokens=40, temperature=0, stream=True,
            response_format=json_enum(f"Upgrade to v2.{i + 1} before the May window"), **kw)
        "".join((ch.choices[0].delta.content or "") for ch in stream if ch.choices)


def abbreviation_anthropic(c: Ctx, twin: bool) -> None:
    """Anthropic stop_sequences ["."] for a one-sentence estimate; the estimates say "approx." and "e.g."."""
    answers = ["Allow approx. 40 minutes at gate B", "Bring a document, e.g. the waybill, to the desk",
               "Expect approx. 2 pallets per bay", "Use a carrier code, e.g. LRK, on the label"]
    for i, ans in enumerate(answers):
        c.anthropic.messages.create(
            model=c.model, max_tokens=40, messages=[{"role": "user", "content": f"Estimate for request {i}?"}],
            stop_sequences=["\n\n"] if twin else ["."],
            extra_body={"temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": _schema(ans)}}})


def comma_in_json_string_anthropic(c: Ctx, twin: bool) -> None:
    """A stop at "," meant for a list reply; the app asked for JSON whose strings hold commas."""
    for i in range(5):
        ans = f"Aisle {i + 2}, bay {10 + i}, top shelf"
        with c.anthropic.messages.stream(
                model=c.model, max_tokens=48, system=POLICY,
                messages=[{"role": "user", "content": f"Where is parcel P-{i}?"}],
                stop_sequences=["<<END>>"] if twin else [","],
                extra_body={"output_config": {"format": {"type": "json_schema", "schema": _schema(ans)}}}) as st:
            "".join(st.text_stream)


def newline_in_code_block_smol(c: Ctx, twin: bool) -> None:
    """SmolLM2 asked for code, the app stops at a newline to keep replies to one line."""
    for task in ("reverse a list", "sum a list of numbers", "count words in a string", "check a palindrome"):
        kw: dict[str, Any] = {} if twin else {"stop": ["\n"]}
        c.ask([{"role": "user", "content": f"Write a Python function to {task}. Answer with a code block."}],
              max_tokens=48, **kw)


# ── an intake step that changed what the prompt says ──────────────────────────────────────────
MATH = ["Simplify x² + 2x for x = 3.", "Is 2⁵ more than 30?", "Write 10⁻³ as a decimal.", "Expand (a + b)².",
        "What is 4³ minus 60?", "Is 3² + 4² equal to 5²?"]
FRACTIONS = ["A recipe needs ½ cup of flour per loaf; how much for 3 loaves?", "Is ¾ of 40 more than 25?",
             "Add ⅓ and ⅙.", "What is ⅝ as a percentage?", "Is ¼ hour 15 minutes?"]
WIDE = ["Status of order ＡＢＣ-12?", "Is the ﬁle for order 7 ready?", "Where is parcel ＰＸ-9?", "Ship order 4 today?"]


def nfkc_powers(c: Ctx, twin: bool) -> None:
    """Maths homework help: the prompts carry powers (planted: a server normalising NFKC; twin: NFC)."""
    for q in MATH:
        c.ask([{"role": "system", "content": "You are a patient maths tutor."}, {"role": "user", "content": q}],
              max_tokens=6)


def nfkc_fractions_anthropic(c: Ctx, twin: bool) -> None:
    """Recipes and loads in fractions, in the system prompt's worked example and the user turn."""
    for q in FRACTIONS:
        c.anthropic.messages.create(model=c.model, max_tokens=6, extra_body={"temperature": 0},
                                    system="Worked example: ½ of 10 is 5. Answer with a number.",
                                    messages=[{"role": "user", "content": q}])


def nfkc_powers_in_history(c: Ctx, twin: bool) -> None:
    """The power sits in an earlier turn of the conversation; the planted run's prompts also hold full-width
    letters (drawing only), the twin's only those: the flag is the same, only the meaning-bearing text differs."""
    for i, q in enumerate(WIDE):
        hist = [{"role": "user", "content": f"My crate is 2 m³, order ＡＢＣ-{i}."} if not twin
                else {"role": "user", "content": f"My crate is large, order ＡＢＣ-{i}."},
                {"role": "assistant", "content": "Noted."}, {"role": "user", "content": q}]
        c.ask(hist, max_tokens=6)


def strip_glues_words(c: Ctx, twin: bool) -> None:
    """Pasted instructions with zero-width spaces standing between words; the server strips them to nothing.
    The twin's zero-width characters sit beside spaces, so stripping them glues nothing."""
    for i in range(5):
        text = (f"Do not \u200bcancel order {i}; \u200brefund it instead." if twin
                else f"Do not\u200bcancel order {i}; refund\u200bit instead.")
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": text}], max_tokens=6)


ENDS_CASES: tuple[Case, ...] = (
    Case("stop_period_mid_number", period_mid_number, ("gen.stop",)),
    Case("stop_period_in_version_stream", version_number_stream, ("gen.stop",)),
    Case("stop_period_after_abbreviation_anthropic", abbreviation_anthropic, ("gen.stop",)),
    Case("stop_comma_in_json_string_anthropic", comma_in_json_string_anthropic, ("gen.stop",)),
    Case("stop_newline_in_code_block_smol", newline_in_code_block_smol, ("gen.stop",), "smol", "smol", model="smol"),
    Case("nfkc_folds_powers", nfkc_powers, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_folds_fractions_anthropic", nfkc_fractions_anthropic, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_folds_power_in_history", nfkc_powers_in_history, ("intake.normalization",), "nfkc", "nfkc"),
    Case("strip_invisible_glues_words", strip_glues_words, ("intake.normalization",), "strip_invisible",
         "strip_invisible"),
)
