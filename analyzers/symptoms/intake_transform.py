"""Silent: the model read other characters than the app sent. An intake step between the request and the
tokenizer rewrote the prompt: a compatibility normal form (``llmtrace serve --normalize nfkc``) turns "x²"
into "x2", "2⁵" into "25", "10⁻³" into "10−3" and "½" into "1⁄2"; stripping invisible characters glues the
two words a zero-width space stood between. The model answers the rewritten question.

Read from ``intake.normalization``'s counts by class of character (tracer/reading/char_folds.py): a class that
bears meaning (powers and indices, fractions, numbers written another way, joiners between words) makes a
finding ranked by the share of passes it touched; folds that change only how text is drawn (full-width
letters, ligatures, composed accents) are info at most.
"""

from __future__ import annotations

from collections import Counter

from llmtrace.analyzers.core.base import SymptomAnalyzer, severity_for
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.reading import char_folds
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

CAUSE = "intake-rewrote-meaning"
_SAYS = {"superscript": "powers and superscripts (x² -> x2)", "subscript": "subscripts (H₂O -> H2O)",
         "fraction": "fractions (½ -> 1⁄2)", "compat_digit": "numbers written another way (①, Ⅻ -> 1, XII)",
         "joiner_between_letters": "invisible joiners between words (the words glued)"}


class IntakeTransform(SymptomAnalyzer):
    symptom = "intake_transform"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        norm = q.stage_sql(S.INTAKE_NORMALIZATION, {
            "form": N.NORMALIZATION_FORM, "strip": N.NORMALIZATION_STRIP,
            "changed": N.NORMALIZATION_CHARS_CHANGED, "meaning": N.NORMALIZATION_MEANING_CHARS,
            "classes": N.NORMALIZATION_CHANGED_CLASSES})
        # every server pass records the stage (the client's has no classes: it changes nothing), so the share is
        # over the passes whose intake the server recorded
        a = q.one(f"""
            SELECT count(*) FILTER (WHERE classes IS NOT NULL OR meaning IS NOT NULL) AS n,
                   count(*) FILTER (WHERE meaning > 0) AS hit, count(*) FILTER (WHERE changed > 0) AS changed,
                   sum(meaning) AS meaning_chars, any_value(form) FILTER (WHERE meaning > 0 OR changed > 0) AS form,
                   bool_or(strip) FILTER (WHERE meaning > 0) AS strip,
                   list(classes) FILTER (WHERE changed > 0) AS classes,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE meaning > 0))[1:5] AS ids,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE changed > 0))[1:5] AS changed_ids
            FROM {norm}""")
        n = int(a.get("n") or 0)
        changed = int(a.get("changed") or 0)
        if not n or not changed:
            return []
        by_class: Counter[str] = Counter()
        for value in a.get("classes") or ():
            by_class.update(char_folds.decode(value))
        hit = int(a.get("hit") or 0)
        form = str(a.get("form") or "none")
        share = hit / n
        if hit:
            meaning = [c for c in char_folds.CLASSES if c in char_folds.MEANING_BEARING and by_class.get(c)]
            what = ", ".join(_SAYS[c] for c in meaning)
            step = (f"the {form} normal form" if any(c != "joiner_between_letters" for c in meaning) else "")
            if "joiner_between_letters" in meaning:
                step = " and ".join(x for x in (step, "the invisible-character strip") if x)
            ids = tuple(a["ids"])
            ev = [Evidence("prompts whose meaning-bearing characters were changed", hit, f"of {n}", ids),
                  Evidence("meaning-bearing characters changed", a["meaning_chars"], "chars", ids),
                  *(Evidence(f"{c.replace('_', ' ')} characters changed", by_class[c], "chars", ids) for c in meaning),
                  Evidence("normal form", form, "", ids),
                  Evidence("share of passes", round(share, 3), "", ids)]
            drawn = {c: k for c, k in by_class.items() if c not in char_folds.MEANING_BEARING}
            if drawn:
                ev.append(Evidence("also folded (drawing only)", ", ".join(f"{c} {k}" for c, k in sorted(drawn.items())),
                                   "", ids))
            return [self.finding(
                S.INTAKE_NORMALIZATION, severity_for(share, warn=0.1, crit=0.4),
                f"{step[0].upper() + step[1:]} changed what {hit} prompts say before the model read them: {what}",
                "An intake step between the app and the tokenizer rewrote characters that carry meaning, so the "
                "model answered another question than the one the app sent. The request looks right in the app's "
                "logs; only the server's intake saw the change.",
                ev, ids,
                "Normalise with NFC (composition only) instead of NFKC, or protect math, fractions and numbers "
                "before folding; strip invisible characters to a space, not to nothing, between two words.",
                0.5 + 0.4 * share, cause=CAUSE, stages=(S.INTAKE_NORMALIZATION,), affected_share=share)]
        ids = tuple(a["changed_ids"])
        drawn_share = changed / n
        return [self.finding(
            S.INTAKE_NORMALIZATION, "info",
            f"The {form} normal form changed how {changed} prompts are drawn, not what they say",
            "Full-width letters, ligatures and composed accents were folded to their plain forms; the text reads "
            "the same to the model.",
            [Evidence("prompts with folded characters", changed, f"of {n}", ids),
             *(Evidence(f"{c.replace('_', ' ')} characters", k, "chars", ids) for c, k in by_class.most_common(4)),
             Evidence("share of passes", round(drawn_share, 3), "", ids)],
            ids, "Nothing to do unless the app relies on those exact characters.", 0.1, cause=CAUSE,
            stages=(S.INTAKE_NORMALIZATION,), affected_share=drawn_share)]
