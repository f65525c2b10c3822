"""Silent: invisible characters. Zero-width characters, non-breaking spaces and look-alike letters in
input add tokens, split prefix-cache matches between texts that look identical, and can smuggle
instructions in untrusted content."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.analyzers.symptoms.untrusted_input import Untrusted, tool_output_findings
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class InvisibleCharacters(SymptomAnalyzer):
    symptom = "invisible_characters"

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = []
        untrusted = tool_output_findings(q)
        if untrusted is not None:
            out.append(self._unscanned(untrusted, _stripped_at_intake(q, untrusted)))
        # the same characters, when they came in with tool output, are the injection's, not a second cause
        normalized = self._normalization(q, untrusted is not None and bool(untrusted.hidden_chars))
        if normalized is not None:
            out.append(normalized)
        injected = self._injection(q)
        if injected is not None:
            out.append(injected)
        return out

    def _unscanned(self, u: Untrusted, stripped: bool) -> Finding:
        """Tool output (or text from outside the app) that reached the prompt with no injection scan.
        ``stripped``: the intake took the invisible characters out of every such prompt before the model read
        it, so hidden characters alone (no instruction) did no harm: info."""
        source = "tool output" if u.from_tools else "text from outside the app (a user turn or pasted content)"
        harmless = stripped and not u.with_orders
        ev = [Evidence(f"prompts whose {source} addresses the model or hides characters", u.passes,
                       f"of {u.scanned} with tool output" if u.from_tools else "", u.trace_ids),
              Evidence("with instruction-like text", u.with_orders, "", u.trace_ids),
              Evidence(f"hidden characters in {source}", u.hidden_chars, "chars", u.trace_ids)]
        if u.example:
            ev.append(Evidence("for example", repr(u.example), "", u.trace_ids[:1]))
        if stripped:
            ev.append(Evidence("invisible characters stripped at intake before the model read them", u.passes,
                               "prompts", u.trace_ids))
        return self.finding(
            S.SAFETY_INJECTION, "critical" if u.with_orders else "info" if harmless else "warning",
            f"{'Tool output' if u.from_tools else 'Text from outside the app'} carried "
            f"{'instructions to the model' if u.with_orders else 'hidden characters'} "
            f"into {u.passes} prompts, unchecked" + ("; the intake stripped them before the model read them"
                                                     if harmless else ""),
            f"What {'a tool returned' if u.from_tools else 'came in from outside'} went into the prompt as it "
            "was; nothing scanned it (no safety.injection span), so text planted in data can steer the model.",
            ev, u.trace_ids, "Scan tool results before they enter the prompt (llmtrace's safety.scan records "
            "safety.injection), strip invisible characters, and keep tool output delimited as data.",
            0.7 if u.with_orders else 0.45, cause="untrusted-input",
            stages=(S.INTAKE_NORMALIZATION, S.SAFETY_INJECTION))

    def _normalization(self, q: Query, untrusted_hidden: bool) -> Finding | None:
        """Invisible or look-alike characters in prompts, one row a pass (``untrusted_hidden``: tool output
        carried hidden characters, so these are the injection's cause)."""
        norm = q.stage_sql(S.INTAKE_NORMALIZATION, {
            "invisible": N.NORMALIZATION_INVISIBLE_CHARS, "nbsp": N.NORMALIZATION_NBSP,
            "confusables": N.NORMALIZATION_CONFUSABLES, "strip": N.NORMALIZATION_STRIP})
        tok = q.stage_sql(S.INTAKE_TOKENIZATION, {"cpt": N.TOKENIZATION_CHARS_PER_TOKEN})
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
        if not n_dirty:
            return None
        ids = tuple(a["ids"])
        ev = [Evidence("prompts with invisible or look-alike characters", n_dirty, f"of {n}", ids),
              Evidence("invisible characters", a["invisible"], "chars", ids),
              Evidence("non-breaking spaces", a["nbsp"], "chars", ids),
              Evidence("prompts where they were kept", kept, f"of {n_dirty}", ids)]
        if a["cpt_dirty"] is not None:
            ev.append(Evidence("characters per token", a["cpt_dirty"], "chars", ids, baseline=a["cpt_clean"]))
        return self.finding(
            S.INTAKE_NORMALIZATION, "warning" if kept else "info",
            f"{n_dirty} prompts carried invisible characters" + (" that reached the model" if kept else ""),
            "Zero-width characters and non-breaking spaces look like nothing but are tokens: they inflate the "
            "prompt and make texts that look the same miss each other's cached prefix.",
            ev, ids, "Normalise input (NFC, strip zero-width and bidi controls, map NBSP to space) before "
            "building prompts.", 0.5 if kept else 0.25,
            cause="untrusted-input" if untrusted_hidden else "invisible-chars",
            stages=(S.INTAKE_NORMALIZATION, S.INTAKE_TOKENIZATION),
        )

    def _injection(self, q: Query) -> Finding | None:
        """Untrusted inputs the injection scan saw hidden characters or instructions in."""
        inj = q.stage_sql(S.SAFETY_INJECTION, {"invisible": N.INJECTION_INVISIBLE_CHARS,
                                               "patterns": N.INJECTION_INSTRUCTION_PATTERNS,
                                               "action": N.INJECTION_ACTION})
        b = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE coalesce(action, 'allow') = 'allow') AS allowed,
                             (list(trace_id ORDER BY start_ns DESC))[1:5] AS ids,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE coalesce(action, 'allow') = 'allow'))[1:5] AS allowed_ids
                      FROM {inj} WHERE invisible > 0 OR patterns > 0""")
        if not b.get("n"):
            return None
        ids = tuple(b["ids"])
        allowed = int(b["allowed"] or 0)
        return self.finding(
            S.SAFETY_INJECTION, "critical" if allowed else "warning",
            f"{b['n']} untrusted inputs carried hidden characters or instructions",
            "Tool output or retrieved text contained invisible characters or instruction-like phrases"
            + (f"; {allowed} were let through." if allowed else ", and they were flagged or blocked."),
            [Evidence("untrusted spans with hidden content", b["n"], "", ids),
             Evidence("allowed through", allowed, "", tuple(b["allowed_ids"] or ()))],
            ids, "Strip invisible characters from untrusted text and keep it delimited as data.",
            0.55 if allowed else 0.3,
        )


def _stripped_at_intake(q: Query, u: Untrusted) -> bool:
    """Whether an intake step stripped invisible characters from the prompt of every trace that carried them
    (``intake.normalization``'s strip, on the server's side of the pass): then none of them reached the model."""
    ids = [t for t in u.hit_traces if t.isalnum()]  # trace ids are hex: nothing to quote
    if not ids:
        return False
    norm = q.stage_sql(S.INTAKE_NORMALIZATION, {"strip": N.NORMALIZATION_STRIP})
    listed = ", ".join(f"'{t}'" for t in ids)
    a = q.one(f"""SELECT count(DISTINCT trace_id) FILTER (WHERE coalesce(strip, false)) AS stripped
                  FROM {norm} WHERE trace_id IN ({listed})""")
    return int(a.get("stripped") or 0) >= len(ids)
