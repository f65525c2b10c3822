"""Analyzers: each symptom of the table in STAGES.md as SQL over the store's views plus a little Python.

    from llmtrace.tracer.storage.store import read_connection
    from llmtrace.analyzers import run_analyzers
    with read_connection("llmtrace.duckdb") as conn:
        for finding in run_analyzers(conn):
            print(finding.stage, finding.title)

``ANALYZERS`` maps a symptom id (see ``llmtrace.tracer.registry.symptoms``) to an object with
``analyze(conn) -> list[Finding]``.

Five sub-packages, each importing only the ones below it (pyproject.toml's contracts):

- ``gate``: ``llmtrace check``, a deploy against its baseline
- ``diagnose``: the table of every symptom's analyzer, the ranked run, ``llmtrace diagnose``
- ``symptoms``: one module per symptom, loaded by its id
- ``cache``: the cache-loss model (why a prefix was recomputed, the KV replay, what a fix would save)
- ``core``: the read API (``Query``), ``Finding`` and its layout, the analyzer's shape, stats, merging, threads

The modules' first paths keep importing (``llmtrace.analyzers.query`` is ``llmtrace.analyzers.core.query``).
"""

from __future__ import annotations

from llmtrace.analyzers.core.finding import Evidence, Finding, Severity
from llmtrace.analyzers.diagnose.registry import ANALYZERS, run_analyzers
from llmtrace.tracer import aliases as _aliases

# the flat layout's module paths (frozen: a module added since has only its new path)
_FIRST_PATHS = {
    "core": ("base", "concurrent_run", "finding", "finding_layout", "flag_rule", "merge", "query", "render", "stats",
             "targets"),
    "cache": ("cache_findings", "cache_loss", "kv_replay", "prefix_divergence", "prompt_compare", "routed_away",
              "ttft_evidence", "what_if", "what_if_log"),
    "symptoms": ("agent_loops", "below_model_card", "broken_json", "cost_after_deploy", "degrades_under_traffic",
                 "detokenizer_window", "different_answer", "early_end", "eviction_under_load", "failed_calls",
                 "failure_kinds", "intake_transform", "invisible_characters", "mangled_text", "refusal_after_text",
                 "session_forgets", "slow_first_token", "slow_stream", "truncation", "untrusted_input",
                 "usage_invariants", "wrong_source"),
    "gate": ("baseline", "check_cli", "check_interval", "check_report"),
    "diagnose": ("catalog", "diagnose_cli", "registry"),
}
_aliases.install(__name__, {m: f"{__name__}.{layer}.{m}" for layer, ms in _FIRST_PATHS.items() for m in ms})

__all__ = ["ANALYZERS", "Evidence", "Finding", "Severity", "run_analyzers"]
