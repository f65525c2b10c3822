"""Agent loops, bill runs up: Loops & tools. Budgets that never stop anything (no caps, or caps hit),
loops the budget detected, and traces where the same tool is called over and over."""

from __future__ import annotations

from typing import Any

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query, sample_ids
from llmtrace.analyzers.symptoms import tool_repeats
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

REPEATS = tool_repeats.REPEATS  # calls of one tool alike in one trace before it looks like a loop
_WHAT = {"args": "with the same arguments", "error": "and got the same error",
         "result": "and got the same result back (no progress)"}
# Read from the messages array (llmtrace.loop.observed=wire) a repeat is only a count: an agent that asks
# for a status again after "pending", or retries a lookup once, repeats a call by design. The same call
# REPEATS times in one request's history (REPEATS - 1 repeats) is the loop; an app's own budget decides
# for itself (its loop_detected stands).
WIRE_REPEATS = REPEATS - 1
MANY_PASSES = 12  # passes in one trace with no budget recorded


class AgentLoops(SymptomAnalyzer):
    symptom = "agent_loops"
    # (it reads the pass table only where no loop.budget span was recorded at all; the hint only orders the
    # work, and reading the table before it is built waits for the build)
    reads_passes = False

    def find(self, q: Query) -> list[Finding]:
        out: list[Finding] = []
        budget = q.stage_sql(S.LOOP_BUDGET, {
            "steps": N.BUDGET_STEPS, "max_steps": N.BUDGET_MAX_STEPS, "spend": N.BUDGET_SPEND_USD,
            "loop": N.BUDGET_LOOP_DETECTED, "stopped_by": N.BUDGET_STOPPED_BY,
            "repeats": N.LOOP_REPEATED_TOOL_CALLS, "observed": N.LOOP_OBSERVED,
            "no_progress": N.LOOP_REPEATED_TOOL_RESULTS})
        looped = (f"(CASE WHEN coalesce(observed, '') = 'wire' THEN coalesce(repeats, 0) >= {WIRE_REPEATS} "
                  "ELSE coalesce(loop, false) OR coalesce(stopped_by, 'none') <> 'none' END)")
        uncapped = f"(coalesce(max_steps, 0) = 0 AND coalesce(steps, 0) >= {MANY_PASSES})"
        # runs, not budget spans: read off the wire every request of a conversation has its own span. The runs
        # are counted off one grouping by trace (two count(DISTINCT) kept two hash sets of every trace id).
        a = q.one(f"""
            WITH b AS MATERIALIZED (SELECT trace_id, start_ns, stopped_by, steps, spend, no_progress,
                                           {looped} AS is_looped,
                                           {uncapped} AS is_uncapped FROM {budget}),
                 runs AS (SELECT count(trace_id) AS n, count(trace_id) FILTER (WHERE looped) AS looped
                          FROM (SELECT trace_id, bool_or(is_looped) AS looped FROM b GROUP BY trace_id))
            SELECT any_value(runs.n) AS n, any_value(runs.looped) AS looped,
                   histogram(coalesce(stopped_by, 'loop')) FILTER (WHERE is_looped) AS caps,
                   median(coalesce(steps, 0)) FILTER (WHERE is_looped) AS steps,
                   median(coalesce(spend, 0)) FILTER (WHERE is_looped) AS spend,
                   max(coalesce(no_progress, 0)) FILTER (WHERE is_looped) AS no_progress,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE is_looped))[1:5] AS looped_ids,
                   count(*) FILTER (WHERE is_uncapped) AS uncapped, max(steps) FILTER (WHERE is_uncapped) AS most,
                   (list(trace_id ORDER BY start_ns DESC) FILTER (WHERE is_uncapped))[1:5] AS uncapped_ids
            FROM b, runs""")
        n_budgets = int(a.get("n") or 0)
        if a.get("looped"):
            ids = tuple(a["looped_ids"])
            out.append(self.finding(
                S.LOOP_BUDGET, "warning", f"{a['looped']} agent runs were stopped by a budget or looped",
                "The loop reached a cap, repeated the same call or got the same result back again; each extra step "
                "re-sent the growing context.",
                [Evidence("runs stopped or looping", a["looped"], f"of {n_budgets}", ids),
                 Evidence("stopped by", dict(a["caps"] or {}), "", ids),
                 Evidence("median steps", a["steps"], "steps", ids),
                 Evidence("median spend", a["spend"], "USD", ids),
                 *([Evidence("calls that got back the same result or error as an earlier one (most in a run)",
                             a["no_progress"], "calls", ids)] if a.get("no_progress") else [])],
                ids, "Open loop.tool_dispatch on these traces: which call repeats, and why its result did not "
                "satisfy the model.", 0.7,
            ))
        if a.get("uncapped"):
            ids = tuple(a["uncapped_ids"])
            # a missing cap is a setting, not harm: the long runs are a warning where some run also looped (the
            # cap would have stopped what was wasted), else worth knowing only
            out.append(self.finding(
                S.LOOP_BUDGET, "warning" if a.get("looped") else "info",
                f"{a['uncapped']} agent runs took {MANY_PASSES}+ steps with no step cap",
                "Nothing bounds these loops: a confused model can run until the wall clock or the bill stops it.",
                [Evidence("uncapped long runs", a["uncapped"], "", ids),
                 Evidence("most steps", a["most"], "steps", ids)],
                ids, "Set max_steps, token and spend caps on the agent loop.", 0.8,
            ))
        out += self._repeated_calls(q)
        if not n_budgets:
            many = q.rows(f"""SELECT trace_id, count(*) AS passes FROM {q.passes}
                              GROUP BY trace_id HAVING count(*) >= {MANY_PASSES} ORDER BY passes DESC, trace_id""")
            if many:
                ids = sample_ids([r["trace_id"] for r in many])
                out.append(self.finding(  # no budget recorded is a missing setting, not measured harm: info
                    S.LOOP_BUDGET, "info", f"{len(many)} traces made {MANY_PASSES}+ passes and record no budget",
                    "Long agent runs with no loop.budget span: nothing shows a cap exists.",
                    [Evidence("traces with many passes", len(many), "", ids),
                     Evidence("most passes", many[0]["passes"], "", ids)],
                    ids, "Wrap the agent loop in a budget (llmtrace's loop helpers record loop.budget).", 0.5,
                ))
        return out

    def _repeated_calls(self, q: Query) -> list[Finding]:
        """Tool spans (the app helpers', a foreign agent's) that repeat (analyzers/symptoms/tool_repeats.py): the
        same tool over the same or near-same arguments, or calls that get nowhere (the same error, or the same
        result after the model saw it, whatever they asked). One tool over distinct arguments with distinct
        results is fan-out: six orders looked up once each is the work asked for. Calls whose arguments and
        results were never recorded cannot be told apart: said at info."""
        rows = tool_repeats.rows(q)
        looped = [r for r in rows if int(r["wasted"] or 0) > 0]
        blind = [r for r in rows if not int(r["wasted"] or 0) and not int(r["with_args"] or 0)
                 and not int(r["failed"] or 0)]
        if looped:
            return [self._looped(looped)]
        if not blind:
            return []
        ids = sample_ids([r["trace_id"] for r in blind])
        top = blind[0]
        return [self.finding(
            S.LOOP_TOOL_DISPATCH, "info",
            f"One tool ran {top['calls']} times in one trace ({top['tool']}); its arguments were not recorded",
            "Without the calls' arguments a loop (the same call again) cannot be told from fan-out (one tool "
            "over distinct inputs), which is the work asked for.",
            [Evidence("traces with many calls of one tool", len(blind), "", ids),
             Evidence("most calls of one tool", top["calls"], "calls", (str(top["trace_id"]),))],
            ids, "Record the tool calls' arguments (capture hashes, or llmtrace's loops helpers) to tell a "
            "loop from fan-out.", 0.1,
        )]

    def _looped(self, looped: list[dict[str, Any]]) -> Finding:
        ids = sample_ids([r["trace_id"] for r in looped])
        top = looped[0]
        wasted = sum(int(r["wasted"]) for r in looped)
        kinds = {tool_repeats.kind_of(r) for r in looped}
        kind = tool_repeats.kind_of(top) if len(kinds) > 1 else kinds.pop()
        what = _WHAT[kind]
        tokens = sum(int(r["wasted_tokens"] or 0) for r in looped)
        one = (str(top["trace_id"]),)
        return self.finding(
            S.LOOP_TOOL_DISPATCH, "warning",
            f"A tool was called {top['most_alike']} times {what} in one trace ({top['tool']})",
            f"{len(looped)} traces called one tool {tool_repeats.REPEATS} or more times with the same (or near-same) "
            "arguments, or got the same error or the same result back each time whatever they asked: the agent "
            f"keeps asking for what it already has, or gets nowhere. {wasted} calls repeated an earlier one.",
            [Evidence("traces with a repeated call", len(looped), "", ids),
             Evidence("calls that repeated an earlier one", wasted, "calls", ids),
             Evidence("repeated by: same arguments / same error / same result",
                      {k: sum(int(r[f"by_{k}"] or 0) for r in looped) for k in tool_repeats.KINDS}, "calls", ids),
             Evidence("most alike calls of one tool", top["most_alike"], "calls", one),
             Evidence("distinct arguments among its calls", top["distinct_args"], f"of {top['calls']}", one),
             Evidence("result tokens of the repeated calls", tokens, "tokens", ids)],
            ids, "Check the tool's result (loop.tool_dispatch result_kind, error): an error, an empty result or the "
            "same answer to every query often makes the model retry; stop after the same result twice.",
            0.6, loss_tokens=float(tokens),
        )
