"""Long session forgets a detail: Loops & tools → Intake (and the positions the forward pass can see).

Compaction that summarised away names or numbers (``loop.compaction`` facts_lost) is the usual cause;
key items placed in the middle of a long context, positions past the trained context, and tokens outside
a sliding window are the other ways a fact stops reaching the model.
"""

from __future__ import annotations

from collections import Counter

from llmtrace.analyzers.base import SymptomAnalyzer
from llmtrace.analyzers.finding import Evidence, Finding
from llmtrace.analyzers.query import Query


class SessionForgets(SymptomAnalyzer):
    symptom = "session_forgets"
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = []
        comp = q.stage_sql("loop.compaction", {
            "trigger": ("llmtrace.compaction.trigger_tokens", "int"), "before": ("llmtrace.compaction.tokens_before", "int"),
            "after": ("llmtrace.compaction.tokens_after", "int"), "turns": ("llmtrace.compaction.turns_summarized", "int"),
            "pinned": ("llmtrace.compaction.pinned", "int"), "lost": ("llmtrace.compaction.facts_lost", "str[]"),
            "method": ("llmtrace.compaction.method", "str"),
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
        if lossy:
            n = int(a["n"])
            ids = tuple(a["ids"])
            facts = Counter(f for lst in a["lost"] for f in lst)
            unpinned = int(a["unpinned"] or 0)
            share = lossy / n
            # an app that sends only its last N messages drops the oldest turns with nothing in their place
            trimmed = int(a.get("windows") or 0) == lossy
            what = "Dropping the oldest turns" if trimmed else "Compaction"
            out.append(self.finding(
                "loop.compaction", "critical" if share >= 0.5 else "warning",
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
            ))
        hit = q.flagged("intake.context_ordering", {"middle": ("llmtrace.ordering.middle_items", "int"),
                                                    "strategy": ("llmtrace.ordering.strategy", "str")},
                        "middle > 0", "mode(strategy) AS strategy")
        if hit:
            order, ids = hit
            out.append(self.finding(
                "intake.context_ordering", "warning", f"Key items sat in the middle of the context in {order['n']} passes",
                "Facts in the middle third of a long context are the ones models use least.",
                [Evidence("passes with key items in the middle", order["n"], "", ids),
                 Evidence("ordering strategy", order["strategy"], "", ids)],
                ids, "Order key items at the ends (ends_first) or repeat them next to the question.", 0.45,
            ))
        hit = q.flagged("forward.positional", {"beyond": ("llmtrace.rope.beyond_trained", "bool"),
                                               "maxpos": ("llmtrace.rope.max_position", "int"),
                                               "trained": ("llmtrace.rope.trained_context", "int")},
                        "beyond", "max(maxpos) AS maxpos, max(trained) AS trained")
        if hit:
            beyond, ids = hit
            out.append(self.finding(
                "forward.positional", "critical", f"{beyond['n']} passes ran past the trained context",
                "Positions beyond the context the model was trained for lose recall unless rotary scaling is set.",
                [Evidence("highest position", beyond["maxpos"], "tokens", ids, baseline=beyond["trained"])], ids,
                "Compact earlier or use a model with a longer trained context.", 0.5,
            ))
        hit = q.flagged("forward.attention_variant", {"outside": ("llmtrace.attention.tokens_outside_window", "int")},
                        "outside > 0", "median(outside) AS outside")
        if hit:
            window, ids = hit
            out.append(self.finding(
                "forward.attention_variant", "warning", f"{window['n']} passes had tokens outside the attention window",
                "A sliding window cannot see tokens further back than its width.",
                [Evidence("median tokens outside the window", window["outside"], "tokens", ids)],
                ids, "Keep the key facts within the window (near the end of the prompt).", 0.4,
            ))
        return out
