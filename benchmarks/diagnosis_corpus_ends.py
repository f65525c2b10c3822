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


def semicolon_in_code_block(c: Ctx, twin: bool) -> None:
    """A coding helper that stops at ";" to take one statement a reply; the answers carry a fenced snippet whose
    first line holds a ";" (JSON-escaped newlines, so the twin's blank-line stop never fires)."""
    snippets = ["```js\nlet total = price; total += fee;\n```", "```c\nint n = count; n++;\n```",
                "```java\nString s = name; s = s.trim();\n```", "```js\nconst q = query; run(q);\n```",
                "```go\nx := limit; y := x * 2\n```"]
    for i, snippet in enumerate(snippets):
        c.ask([{"role": "system", "content": POLICY}, {"role": "user", "content": f"Show fix {i} as code."}],
              max_tokens=48, response_format=json_enum(snippet), stop=["\n\n"] if twin else [";"])


def semicolon_in_tilde_block_anthropic(c: Ctx, twin: bool) -> None:
    """Anthropic stop_sequences [";"] to take one SQL statement a reply; the answers open a ~~~ fenced block (markdown's
    other fence) whose statement holds a ";" before a second one. Twin: a stop sequence that never occurs."""
    blocks = ["~~~sql\nSELECT id FROM parcels WHERE bay = 'B4'; SELECT 1\n~~~",
              "~~~sql\nUPDATE racks SET full = true; COMMIT\n~~~", "~~~\nDELETE FROM holds WHERE stale; VACUUM\n~~~",
              "~~~sql\nSELECT name FROM carriers; SELECT 2\n~~~"]
    for i, block in enumerate(blocks):
        c.anthropic.messages.create(
            model=c.model, max_tokens=48, system=POLICY, messages=[{"role": "user", "content": f"Query {i} please."}],
            stop_sequences=["<<END>>"] if twin else [";"],
            extra_body={"temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": _schema(block)}}})


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


SUBSCRIPTS = ["Balance H₂ + O₂ → H₂O for me.", "Is x₁ + x₂ = 10 when x₁ = 4?", "Rank the steps ① mix ② bake ③ cool.",
              "Is CO₂ heavier than O₂?", "What is a₃ if aₙ = 2n?"]


def nfkc_subscripts_anthropic(c: Ctx, twin: bool) -> None:
    """Chemistry and indexed variables through the Anthropic SDK: subscripts and circled numbers, which NFKC folds
    to plain digits ("x₁ + x₂" reads "x1 + x2"). Planted: a server normalising NFKC; twin: the default (NFC)."""
    for q in SUBSCRIPTS:
        c.anthropic.messages.create(model=c.model, max_tokens=6, extra_body={"temperature": 0},
                                    system="You check homework. Answer briefly.",
                                    messages=[{"role": "user", "content": q}])


def strip_word_joiner_anthropic(c: Ctx, twin: bool) -> None:
    """A system prompt pasted from a wiki, word joiners (U+2060) standing in for spaces between words; a server
    that strips invisible characters glues them ("approvalfrom"). The twin's joiners sit next to spaces."""
    for i in range(5):
        rule = ("Refunds need approval \u2060from a supervisor; \u2060never refund twice." if twin
                else "Refunds need approval\u2060from a supervisor; never\u2060refund twice.")
        c.anthropic.messages.create(model=c.model, max_tokens=6, extra_body={"temperature": 0},
                                    system=f"{rule} {POLICY}",
                                    messages=[{"role": "user", "content": f"Can I get refund R-{i} today?"}])


def strip_soft_hyphens_twin(c: Ctx, twin: bool) -> None:
    """Planted: a handbook pasted with zero-width spaces where its spaces were ("Refunds\u200bneed"); twin: the
    same handbook with soft hyphens inside its long words ("super\u00advisor"), which a strip rejoins harmlessly."""
    for i in range(5):
        text = ("Ship\u00adments need a super\u00advisor's ap\u00adproval before any re\u00adfund is issued." if twin
                else "Shipments\u200bneed a supervisor's\u200bapproval before\u200bany refund is issued.")
        c.ask([{"role": "system", "content": f"{text} {POLICY}"},
               {"role": "user", "content": f"Is refund R-{40 + i} approved?"}], max_tokens=6)


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
    Case("stop_semicolon_in_code_block", semicolon_in_code_block, ("gen.stop",)),
    Case("stop_semicolon_in_tilde_block_anthropic", semicolon_in_tilde_block_anthropic, ("gen.stop",)),
    Case("stop_newline_in_code_block_smol", newline_in_code_block_smol, ("gen.stop",), "smol", "smol", model="smol"),
    Case("nfkc_folds_powers", nfkc_powers, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_folds_fractions_anthropic", nfkc_fractions_anthropic, ("intake.normalization",), "nfkc", "default"),
    Case("nfkc_folds_power_in_history", nfkc_powers_in_history, ("intake.normalization",), "nfkc", "nfkc"),
    Case("nfkc_folds_subscripts_anthropic", nfkc_subscripts_anthropic, ("intake.normalization",), "nfkc", "default"),
    Case("strip_word_joiner_anthropic", strip_word_joiner_anthropic, ("intake.normalization",), "strip_invisible",
         "strip_invisible"),
    Case("strip_zero_width_vs_soft_hyphens", strip_soft_hyphens_twin, ("intake.normalization",), "strip_invisible",
         "strip_invisible"),
    Case("strip_invisible_glues_words", strip_glues_words, ("intake.normalization",), "strip_invisible",
         "strip_invisible"),
)
