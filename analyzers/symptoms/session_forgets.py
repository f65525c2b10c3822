"""Long session forgets a detail: Loops & tools → Intake (and the positions the forward pass can see).

Compaction that summarised away names or numbers (``loop.compaction`` facts_lost) is the usual cause;
key items placed in the middle of a long context, positions past the trained context, and tokens outside
a sliding window are the other ways a fact stops reaching the model.
"""

from __future__ import annotations

from collections import Counter

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.flag_rule import FlagRule, Quote, flag_findings
from llmtrace.analyzers.core.query import Query
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

# The other ways a fact stops reaching the model, each a count of flagged spans
POSITION_RULES = (
    FlagRule(S.INTAKE_CONTEXT_ORDERING, {"middle": N.ORDERING_MIDDLE_ITEMS, "strategy": N.ORDERING_STRATEGY},
             where="middle > 0", aggs="mode(strategy) AS strategy", severity="warning",
             title="Key items sat in the middle of the context in {n} passes",
             summary="Facts in the middle third of a long context are the ones models use least.",
             evidence=(Quote("passes with key items in the middle", "n"), Quote("ordering strategy", "strategy")),
             next_check="Order key items at the ends (ends_first) or repeat them next to the question.",
             score=0.45),
    FlagRule(S.FORWARD_POSITIONAL, {"beyond": N.ROPE_BEYOND_TRAINED, "maxpos": N.ROPE_MAX_POSITION,
                                    "trained": N.ROPE_TRAINED_CONTEXT},
             where="beyond", aggs="max(maxpos) AS maxpos, max(trained) AS trained", severity="critical",
             title="{n} passes ran past the trained context",
             summary="Positions beyond the context the model was trained for lose recall unless rotary "
                     "scaling is set.",
             evidence=(Quote("highest position", "maxpos", "tokens", baseline="trained"),),
             next_check="Compact earlier or use a model with a longer trained context.", score=0.5),
    FlagRule(S.FORWARD_ATTENTION_VARIANT, {"outside": N.ATTENTION_TOKENS_OUTSIDE_WINDOW},
             where="outside > 0", aggs="median(outside) AS outside", severity="warning",
             title="{n} passes had tokens outside the attention window",
             summary="A sliding window cannot see tokens further back than its width.",
             evidence=(Quote("median tokens outside the window", "outside", "tokens"),),
             next_check="Keep the key facts within the window (near the end of the prompt).", score=0.4),
)


class SessionForgets(SymptomAnalyzer):
    symptom = "session_forgets"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        lost = self._compaction(q)
        return ([lost] if lost is not None else []) + flag_findings(self, q, POSITION_RULES)

    def _compaction(self, q: Query) -> Finding | None:
        """Compactions (or windows over the history) that dropped names or numbers the context held."""
        comp = q.stage_sql(S.LOOP_COMPACTION, {
            "trigger": N.COMPACTION_TRIGGER_TOKENS, "before": N.COMPACTION_TOKENS_BEFORE,
            "after": N.COMPACTION_TOKENS_AFTER, "turns": N.COMPACTION_TURNS_SUMMARIZED,
            "pinned": N.COMPACTION_PINNED, "lost": N.COMPACTION_FACTS_LOST, "method": N.COMPACTION_METHOD,
        })
        a = q.one(f"""
            SELECT count(*) AS n, count(*) FILTER (WHERE len(lost) > 0) AS lossy,
                   count(*) FILTER (WHERE len(lost) > 0 AND coalesce(pinned, 0) = 0) AS unpinned,
                   median(trigger) FILTER (WHERE len(lost) > 0) AS trigger,
                   median(before) FILTER (WHERE len(lost) > 0) AS before,
                   median(after) FILTER (WHERE len(lost) > 0) AS after,
                   median(coalesce(pinned, 0)) FILTER (WHERE len(lost) > 0) AS pinned,
                   count(*) FILTER (WHERE len(lost) > 0 AND method = 'window') AS windows,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE len(lost) > 0))[1:5] AS ids,
                   (list(lost ORDER BY start_ns DESC) FILTER (WHERE len(lost) > 0))[1:200] AS lost
            FROM {comp}""")
        lossy = int(a.get("lossy") or 0)
        if not lossy:
            return None
        n = int(a["n"])
        ids = tuple(a["ids"])
        facts = Counter(f for lst in a["lost"] for f in lst)
        unpinned = int(a["unpinned"] or 0)
        share = lossy / n
        # an app that sends only its last N messages drops the oldest turns with nothing in their place
        trimmed = int(a.get("windows") or 0) == lossy
        what = "Dropping the oldest turns" if trimmed else "Compaction"
        return self.finding(
            S.LOOP_COMPACTION, "critical" if share >= 0.5 else "warning",
            f"{what} {'lost' if trimmed else 'dropped'} {len(facts)} fact{'s' if len(facts) != 1 else ''}: {', '.join(list(facts)[:4])}",
            (f"{lossy} of {n} requests sent only the latest turns of their conversation, leaving out names or "
             "numbers that only the dropped turns held" if trimmed else
             f"{lossy} of {n} compactions summarised away names or numbers that were in the context before")
            + (f"; {unpinned} of them pinned nothing" if unpinned else "") + ".",
            [Evidence("compactions that lost facts", lossy, f"of {n}", ids),
             Evidence("facts lost", [f for f, _ in facts.most_common(8)], "", ids),
             Evidence("trigger threshold", a["trigger"], "tokens", ids),
             Evidence("context before → after", f"{a['before'] or 0:.0f} → {a['after'] or 0:.0f}", "tokens", ids),
             Evidence("items pinned", a["pinned"], "", ids)],
            ids, ("Keep identifiers, numbers and commitments (order ids, names, amounts) from the dropped turns: "
                 "summarise them into a pinned note, or keep more of the history." if trimmed else
                 "Pin identifiers, numbers and commitments (order ids, names, amounts) so compaction keeps them "
                 "verbatim, or raise the trigger threshold."), 0.6 + 0.4 * share,
        )
