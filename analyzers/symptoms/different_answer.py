"""Same prompt, different answer: Generation (and the routing that picks the weights).

Passes are grouped by prompt hash; a group with more than one output hash is a symptom. The cause is
read off the group: temperature above zero (sampling by design), different models (routing), and at
temperature zero the mechanism the passes recorded: speculation drafting, a batch shared with others
(batch size above one, in different compositions), the prefix-cache path (passes of one sequence each, some
prefilled whole and some from cached tokens), or different replicas of the same model.
"""

from __future__ import annotations

from llmtrace.analyzers.core.base import SymptomAnalyzer
from llmtrace.analyzers.core.finding import Evidence, Finding
from llmtrace.analyzers.core.query import Query, Row, attr, sample_ids
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

# The causes a group of passes (one prompt, more than one answer) is put down to, in the order of their findings
CAUSES = ("sampling", "speculation", "batching", "prefix_cache", "replica", "routing", "other")


class DifferentAnswer(SymptomAnalyzer):
    symptom = "different_answer"

    def find(self, q: Query) -> list[Finding]:
        groups = self._groups(q)
        if not groups:
            return []
        by_cause: dict[str, list[Row]] = {c: [] for c in CAUSES}
        for g in groups:
            by_cause[_cause(g)].append(g)
        said = {"sampling": self._sampling, "speculation": self._speculation, "batching": self._batching,
                "prefix_cache": self._prefix_cache, "replica": self._replica, "routing": self._routing,
                "other": self._other}
        return [said[c](gs, len(groups)) for c, gs in by_cause.items() if gs]

    def _groups(self, q: Query) -> list[Row]:
        """The prompts (under one length cap) with more than one answer, each with what its passes recorded:
        temperatures, seeds, batch compositions, cached tokens, models, replicas, and the engine's modes."""
        # The same prompt under another length cap is another request: an answer cut at 6 tokens and the
        # same answer let run to 60 differ by design (a deploy that raised max_tokens is no nondeterminism).
        cap = "coalesce(max_tokens, -1)"
        # An answer whose every token its constraint forced (a schema with one allowed value) is the schema's,
        # not the model's: the same question under two such schemas has two answers by design, and neither
        # batching nor sampling could have moved it. The schema is not part of the prompt hash, so those
        # passes are left out of the comparison.
        # Only the passes of a prompt that already has two answers under one cap are looked up (leaving passes
        # out can only take answers away), so the constraint spans of every other pass are never parsed. Those
        # passes (``cand``) are read once: a group that still has two answers once the forced ones are left out
        # is one of theirs, so the groups are made from them alone (one grouping of every pass, not three).
        groups = q.rows(f"""
            WITH g AS MATERIALIZED (
                SELECT prompt_hash, {cap} AS cap FROM {q.passes} WHERE output_hash IS NOT NULL
                GROUP BY prompt_hash, {cap} HAVING count(DISTINCT output_hash) > 1),
            cand AS MATERIALIZED (
                SELECT p.*, coalesce(p.server_span_id, p.span_id) AS sid FROM {q.passes} p
                JOIN g ON g.prompt_hash = p.prompt_hash AND g.cap = coalesce(p.max_tokens, -1)
                WHERE p.output_hash IS NOT NULL),
            forced AS MATERIALIZED (
                SELECT c.parent_span_id FROM {q.spans} c JOIN cand f ON c.parent_span_id = f.sid
                WHERE c.stage = '{S.GEN_CONSTRAINED}' AND f.output_tokens > 0
                  AND {attr(N.CONSTRAINT_FORCED_TOKENS, column='c.attributes')} >= f.output_tokens)
            SELECT prompt_hash, count(*) AS n, count(DISTINCT output_hash) AS outputs,
                   list(trace_id ORDER BY start_ns) AS trace_ids, list(sid) AS span_ids,
                   max(coalesce(temperature, 1.0)) AS max_temp, min(coalesce(temperature, 1.0)) AS min_temp,
                   count(DISTINCT seed) AS seeds, count(*) FILTER (WHERE seed IS NULL) AS unseeded,
                   count(DISTINCT composition_hash) AS compositions,
                   count(DISTINCT coalesce(cached_tokens, 0)) AS cache_shapes,
                   list(DISTINCT coalesce(cached_tokens, 0)) AS cached_list,
                   list(DISTINCT composition_hash) FILTER (WHERE composition_hash IS NOT NULL) AS composition_list,
                   count(DISTINCT coalesce(response_model, model)) AS models,
                   list(DISTINCT coalesce(response_model, model)) AS model_list,
                   count(DISTINCT replica) AS replicas, list(DISTINCT replica) FILTER (WHERE replica IS NOT NULL) AS replica_list
            FROM cand WHERE sid NOT IN (SELECT parent_span_id FROM forced)
            GROUP BY prompt_hash, {cap} HAVING count(DISTINCT output_hash) > 1
            ORDER BY min(start_ns), prompt_hash, {cap}""")  # the same groups quoted in the same order on every engine
        invariant, drafted, batch = self._engine_modes(q, [sid for g in groups for sid in g["span_ids"]])
        for g in groups:
            g["any_invariant"] = any(sid in invariant for sid in g["span_ids"])
            g["speculated"] = sum(1 for sid in g["span_ids"] if sid in drafted)
            sizes = [batch[sid] for sid in g["span_ids"] if sid in batch]
            # None: no engine span says (a hosted provider, a foreign server): composition alone decides
            g["batch_max"] = max(sizes) if sizes else None
        return groups

    def _sampling(self, gs: list[Row], total: int) -> Finding:
        ids = sample_ids([t for g in gs for t in g["trace_ids"]])
        return self.finding(
            S.GEN_SAMPLING, "warning",
            f"{_prompts(len(gs))} answered differently because sampling was random",
            "Identical prompts ran at temperature above zero without a fixed seed, so different answers are "
            "expected by design.",
            [Evidence("prompts with more than one answer", len(gs), f"of {total} such prompts", ids),
             Evidence("temperature", max(float(g["max_temp"]) for g in gs), "", ids),
             Evidence("passes without a seed", sum(int(g["unseeded"]) for g in gs), "", ids)],
            ids, "Set temperature 0 (or a fixed seed) where answers must repeat; open gen.sampling for the "
            "effective values.", 0.5 + 0.5 * len(gs) / total,
        )

    def _speculation(self, gs: list[Row], total: int) -> Finding:
        return self._greedy_drift(
            S.GEN_SPECULATION, gs, total, "with speculative decoding on",
            "speculation checks drafted tokens several at a time, in other shapes than a one-token decode step,",
            [Evidence("passes that drafted tokens", sum(int(g["speculated"]) for g in gs),
                      f"of {sum(int(g['n']) for g in gs)}")],
            "Turn speculation off (or run batch-invariant kernels) where answers must repeat, and confirm the "
            "answers agree; open gen.speculation for each pass's drafts.")

    def _batching(self, gs: list[Row], total: int) -> Finding:
        comps = sorted({c for g in gs for c in (g["composition_list"] or [])})
        cached = sorted({int(c) for g in gs for c in (g["cached_list"] or [])})
        return self._greedy_drift(
            S.FORWARD_BATCHING, gs, total, "in different batches",
            "the same prompt ran in batches of different shapes, shared with other sequences",
            [Evidence("batch compositions seen", comps[:6], ""),
             Evidence("cached prompt tokens seen", cached[:6], "tokens")],
            "Run the server in batch-invariant mode (or with a batch of one) and confirm the answers agree; "
            "open forward.batching for each pass's composition.")

    def _prefix_cache(self, gs: list[Row], total: int) -> Finding:
        cached = sorted({int(c) for g in gs for c in (g["cached_list"] or [])})
        sizes = [int(g["batch_max"]) for g in gs if g["batch_max"] is not None]
        # an engine that recorded its batches said each pass ran alone; a hosted provider or a foreign
        # server says nothing of batches, and its passes all ran in one composition as far as anyone knows
        alone = ("each pass ran alone (batch of one)" if sizes else
                 "no batch was recorded (one composition as far as the spans say)")
        return self._greedy_drift(
            S.CACHE_PREFIX_MATCH, gs, total, "depending on the prefix-cache path",
            f"{alone}, but some prefilled the whole prompt and others started from cached tokens, so attention "
            "over the prompt ran in other shapes",
            [Evidence("cached prompt tokens seen", cached[:6], "tokens"),
             Evidence("largest batch size", max(sizes), "sequences") if sizes else
             Evidence("batch size", "not recorded (a hosted provider or a foreign server)", "")],
            "Compare the answers of a cold prefill and a cache hit (cache.prefix_match cached tokens); where "
            "answers must repeat, run batch-invariant kernels or keep the cache path fixed.")

    def _replica(self, gs: list[Row], total: int) -> Finding:
        replicas = sorted({r for g in gs for r in (g["replica_list"] or [])})
        return self._greedy_drift(
            S.ARRIVAL_REPLICA_SELECTION, gs, total, "on different replicas of the same model",
            "the same prompt ran on different replicas (their own devices, caches and batches)",
            [Evidence("replicas that answered", replicas[:6], "")],
            "Pin the prompt to one replica (prefix-aware routing) and confirm the answers agree; open "
            "arrival.replica_selection for each pass's replica.")

    def _routing(self, gs: list[Row], total: int) -> Finding:
        ids = sample_ids([t for g in gs for t in g["trace_ids"]])
        models = sorted({m for g in gs for m in (g["model_list"] or []) if m})
        return self.finding(
            S.ARRIVAL_MODEL_ROUTING, "critical", f"{_prompts(len(gs))} answered by different models",
            "The same prompt reached different weights, so different answers are no surprise.",
            [Evidence("prompts with more than one answer", len(gs), f"of {total}", ids),
             Evidence("models that answered", models, "", ids)],
            ids, "Open arrival.model_routing: check aliases and fallbacks.", 0.6 + 0.4 * len(gs) / total,
        )

    def _other(self, gs: list[Row], total: int) -> Finding:
        ids = sample_ids([t for g in gs for t in g["trace_ids"]])
        replicas = sorted({r for g in gs for r in (g["replica_list"] or [])})
        return self.finding(
            S.GEN_SAMPLING, "info", f"{len(gs)} prompts gave different answers with no recorded cause",
            "Same model, greedy or seeded sampling, same batch composition (or invariant kernels).",
            [Evidence("prompts with more than one answer", len(gs), f"of {total}", ids),
             Evidence("replicas", replicas, "", ids)],
            ids, "Open gen.penalties and gen.constrained on the listed traces; compare replicas.", 0.2,
        )

    def _greedy_drift(self, stage: str, gs: list[Row], total: int, where: str, shapes: str,
                      evidence: list[Evidence], next_check: str) -> Finding:
        """Greedy answers that moved with the shapes the arithmetic ran in (batching, or speculation's checks)."""
        ids = sample_ids([t for g in gs for t in g["trace_ids"]])
        return self.finding(
            stage, "warning", f"{len(gs)} prompts at temperature 0 gave different answers {where}",
            f"Greedy decoding is only repeatable when the arithmetic is: {shapes} without batch-invariant "
            "kernels, and the logits moved enough to flip a token.",
            [Evidence("prompts with more than one answer", len(gs), f"of {total} such prompts", ids),
             Evidence("temperature", 0.0, "", ids),
             *(Evidence(e.label, e.value, e.unit, ids) for e in evidence),
             Evidence("batch-invariant mode", False, "", ids)],
            ids, next_check, 0.5 + 0.5 * len(gs) / total)

    def _engine_modes(self, q: Query, pass_span_ids: list[str]) -> tuple[set[str], set[str], dict[str, int]]:
        """Pass span ids whose forward.batching ran in batch-invariant mode, those that drafted tokens, and each
        pass's largest batch size."""
        if not pass_span_ids:
            return set(), set(), {}
        # the passes' stage spans first, then their JSON (a filter on both parses every such span's)
        rows = q.rows(f"""WITH b AS MATERIALIZED (SELECT parent_span_id, stage, attributes FROM {q.spans}
                                                  WHERE stage IN ('{S.FORWARD_BATCHING}', '{S.GEN_SPECULATION}')
                                                    AND parent_span_id IN (SELECT unnest(?::VARCHAR[])))
                          SELECT parent_span_id, stage, {attr(N.BATCH_INVARIANT_MODE)} AS inv,
                                 {attr(N.BATCH_SIZE_MAX)} AS size_max,
                                 {attr(N.SPEC_DRAFTED)} AS drafted FROM b""",
                      [pass_span_ids])
        batching = [r for r in rows if r["stage"] == S.FORWARD_BATCHING]
        return ({str(r["parent_span_id"]) for r in batching if r["inv"]},
                {str(r["parent_span_id"]) for r in rows if r["stage"] == S.GEN_SPECULATION and (r["drafted"] or 0) > 0},
                {str(r["parent_span_id"]): int(r["size_max"]) for r in batching if r["size_max"] is not None})


def _cause(g: Row) -> str:
    """The cause (one of CAUSES) a group of answers is put down to, from what its passes recorded."""
    if int(g["models"]) > 1:
        return "routing"
    if float(g["max_temp"]) > 0 and (int(g["unseeded"]) > 0 or int(g["seeds"]) > 1):
        return "sampling"
    if g["speculated"] and not g["any_invariant"]:
        # Drafts are checked by scoring several tokens in one forward pass: other shapes than a one-token
        # decode step, so greedy logits move as they do between batch shapes (and which tokens were drafted,
        # and so the shapes, depends on the batch too).
        return "speculation"
    if g["any_invariant"]:
        return "replica" if int(g["replicas"]) > 1 else "other"
    if int(g["compositions"]) > 1 and (g["batch_max"] is None or g["batch_max"] > 1):
        # Different batches: the arithmetic ran in other shapes, which moves greedy logits without
        # batch-invariant kernels. (A composition hash differs between two passes of one sequence each too,
        # by their lengths: that is no batch, so the batch size must say one was shared.)
        return "batching"
    if int(g["cache_shapes"]) > 1:
        # One sequence at a time, but some passes prefilled the whole prompt and others started from cached
        # tokens: attention over the prompt ran in other shapes (a cold prefill vs a cache hit)
        return "prefix_cache"
    if int(g["replicas"]) > 1:
        return "replica"
    return "other"


def _prompts(n: int) -> str:
    return "1 prompt was" if n == 1 else f"{n} prompts were"
