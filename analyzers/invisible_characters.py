"""Silent: invisible characters. Zero-width characters, non-breaking spaces and look-alike letters in
input add tokens, split prefix-cache matches between texts that look identical, and can smuggle
instructions in untrusted content."""

from __future__ import annotations

from llmtrace.analyzers.base import SymptomAnalyzer
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query
from llmtrace.analyzers.untrusted_input import tool_output_findings


class InvisibleCharacters(SymptomAnalyzer):
    symptom = "invisible_characters"

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = []
        untrusted = tool_output_findings(q)
        if untrusted is not None:
            u = untrusted
            source = "tool output" if u.from_tools else "text from outside the app (a user turn or pasted content)"
            ev = [Evidence(f"prompts whose {source} addresses the model or hides characters", u.passes,
                           f"of {u.scanned} with tool output" if u.from_tools else "", u.trace_ids),
                  Evidence("with instruction-like text", u.with_orders, "", u.trace_ids),
                  Evidence(f"hidden characters in {source}", u.hidden_chars, "chars", u.trace_ids)]
            if u.example:
                ev.append(Evidence("for example", repr(u.example), "", u.trace_ids[:1]))
            out.append(self.finding(
                "safety.injection", "critical" if u.with_orders else "warning",
                f"{'Tool output' if u.from_tools else 'Text from outside the app'} carried "
                f"{'instructions to the model' if u.with_orders else 'hidden characters'} "
                f"into {u.passes} prompts, unchecked",
                f"What {'a tool returned' if u.from_tools else 'came in from outside'} went into the prompt as it "
                "was; nothing scanned it (no safety.injection span), so text planted in data can steer the model.",
                ev, u.trace_ids, "Scan tool results before they enter the prompt (llmtrace's safety.scan records "
                "safety.injection), strip invisible characters, and keep tool output delimited as data.",
                0.7 if u.with_orders else 0.45, cause="untrusted-input",
                stages=("intake.normalization", "safety.injection")))
        norm = q.stage_sql("intake.normalization", {
            "invisible": ("llmtrace.normalization.invisible_chars", "int"), "nbsp": ("llmtrace.normalization.nbsp", "int"),
            "confusables": ("llmtrace.normalization.confusables", "int"), "strip": ("llmtrace.normalization.strip", "bool")})
        tok = q.stage_sql("intake.tokenization", {"cpt": ("llmtrace.tokenization.chars_per_token", "float")})
        dirty = "coalesce(n.invisible, 0) + coalesce(n.nbsp, 0) + coalesce(n.confusables, 0) > 0"
        # One row a pass: the middleware and the server each record the prompt's counts (a joined pass has
        # both spans), and six calls are six prompts, not twelve. Stripped on either side: it never reached
        # the model.
        # (a pass's span_id is its client span's where it has one: a span under a client pass span is keyed by its
        # parent already, one under a server pass span by the pass it joined, so one join names every pass)
        # (avg: a pass has one tokenization a side, and the mean of two is their median, without a median's
        # list per group)
        per_pass = f"""(SELECT coalesce(ps.span_id, n.parent_span_id) AS pass, any_value(n.trace_id) AS trace_id,
                   max(n.start_ns) AS start_ns, max(n.invisible) AS invisible, max(n.nbsp) AS nbsp,
                   max(n.confusables) AS confusables, bool_or(coalesce(n.strip, false)) AS strip, avg(t.cpt) AS cpt
            FROM {norm} n LEFT JOIN {tok} t ON t.parent_span_id = n.parent_span_id
            LEFT JOIN {q.passes} ps ON ps.server_span_id = n.parent_span_id
            GROUP BY 1)"""
        a = q.one(f"""
            SELECT count(*) AS n, count(*) FILTER (WHERE {dirty}) AS dirty,
                   count(*) FILTER (WHERE {dirty} AND NOT coalesce(n.strip, false)) AS kept,
                   sum(n.invisible) FILTER (WHERE {dirty}) AS invisible, sum(n.nbsp) FILTER (WHERE {dirty}) AS nbsp,
                   median(n.cpt) FILTER (WHERE {dirty}) AS cpt_dirty, median(n.cpt) FILTER (WHERE NOT ({dirty})) AS cpt_clean,
                   (list(n.trace_id ORDER BY n.start_ns DESC) FILTER (WHERE {dirty}))[1:5] AS ids
            FROM {per_pass} n""")
        n, n_dirty, kept = (int(a.get(k) or 0) for k in ("n", "dirty", "kept"))
        if n_dirty:
            ids = tuple(a["ids"])
            ev = [Evidence("prompts with invisible or look-alike characters", n_dirty, f"of {n}", ids),
                  Evidence("invisible characters", a["invisible"], "chars", ids),
                  Evidence("non-breaking spaces", a["nbsp"], "chars", ids),
                  Evidence("prompts where they were kept", kept, f"of {n_dirty}", ids)]
            if a["cpt_dirty"] is not None:
                ev.append(Evidence("characters per token", a["cpt_dirty"], "chars", ids, baseline=a["cpt_clean"]))
            out.append(self.finding(
                "intake.normalization", "warning" if kept else "info",
                f"{n_dirty} prompts carried invisible characters" + (" that reached the model" if kept else ""),
                "Zero-width characters and non-breaking spaces look like nothing but are tokens: they inflate the "
                "prompt and make texts that look the same miss each other's cached prefix.",
                ev, ids, "Normalise input (NFC, strip zero-width and bidi controls, map NBSP to space) before "
                "building prompts.", 0.5 if kept else 0.25,
                # the same characters, when they came in with tool output, are the injection's, not a second cause
                cause="untrusted-input" if untrusted is not None and untrusted.hidden_chars else "invisible-chars",
                stages=("intake.normalization", "intake.tokenization"),
            ))
        inj = q.stage_sql("safety.injection", {"invisible": ("llmtrace.injection.invisible_chars", "int"),
                                               "patterns": ("llmtrace.injection.instruction_patterns", "int"),
                                               "action": ("llmtrace.injection.action", "str")})
        b = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE coalesce(action, 'allow') = 'allow') AS allowed,
                             (list(trace_id ORDER BY start_ns DESC))[1:5] AS ids,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE coalesce(action, 'allow') = 'allow'))[1:5] AS allowed_ids
                      FROM {inj} WHERE invisible > 0 OR patterns > 0""")
        if b.get("n"):
            ids = tuple(b["ids"])
            allowed = int(b["allowed"] or 0)
            out.append(self.finding(
                "safety.injection", "critical" if allowed else "warning",
                f"{b['n']} untrusted inputs carried hidden characters or instructions",
                "Tool output or retrieved text contained invisible characters or instruction-like phrases"
                + (f"; {allowed} were let through." if allowed else ", and they were flagged or blocked."),
                [Evidence("untrusted spans with hidden content", b["n"], "", ids),
                 Evidence("allowed through", allowed, "", tuple(b["allowed_ids"] or ()))],
                ids, "Strip invisible characters from untrusted text and keep it delimited as data.",
                0.55 if allowed else 0.3,
            ))
        return out
