"""Open model scores below its card: Intake. The chat template used differs from the model's own, so
the model sees turn markers it was not tuned on."""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S


class BelowModelCard(SymptomAnalyzer):
    symptom = "below_model_card"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        rel = q.stage_sql(S.INTAKE_CHAT_TEMPLATE, {"matches": N.TEMPLATE_MATCHES_MODEL, "hash": N.TEMPLATE_HASH})
        a = q.one(f"""SELECT count(*) AS n, count(*) FILTER (WHERE matches = false) AS bad,
                             mode(hash) FILTER (WHERE matches = false) AS used,
                             any_value(hash) FILTER (WHERE matches) AS own,
                             (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE matches = false))[1:5] AS ids
                      FROM {rel}""")
        n, bad = int(a.get("n") or 0), int(a.get("bad") or 0)
        if not bad:
            return []
        share = bad / n
        ids = tuple(a["ids"])
        return [self.finding(
            S.INTAKE_CHAT_TEMPLATE, "critical" if share >= 0.5 else "warning",
            f"{share:.0%} of passes used a chat template that is not the model's own",
            f"{bad} of {n} prompts were rendered with a different template than the one in the model's metadata; "
            "quality drops without any error.",
            [Evidence("passes on a foreign template", bad, f"of {n}", ids),
             Evidence("template hash used", a["used"], "", ids, baseline=a["own"])],
            ids, "Render with the model's own template (drop a custom template override), then re-run the eval.",
            0.5 + 0.5 * share,
        )]
