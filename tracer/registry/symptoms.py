"""The symptom table: each complaint a user brings, the phases to open and the first evidence to read.

Analyzers implement one symptom each; the TUI's symptom search and ``diagnose --search`` match the
phrases here. A symptom's row names the stages that explain it (``stages``): the one place that link is
written; each stage's ``Stage.symptoms`` is derived from these rows when the registry loads
(``registry/stages.py``), so adding a symptom touches this file and its analyzer only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Symptom:
    id: str
    title: str
    phases: tuple[str, ...]
    first_evidence: str
    phrases: tuple[str, ...]  # how people say it; used by free-text search
    silent: bool = False
    # the stages that explain it, in pipeline order (stage ids; the registry checks each one exists)
    stages: tuple[str, ...] = ()


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom("slow_first_token", "Slow first token, fast stream", ("arrival", "cache", "forward"),
            "prefix-cache hit length, first volatile field, prompt tokens, queue wait",
            ("first token is slow", "slow first token", "ttft", "time to first token", "takes long to start"),
            stages=("arrival.connection", "arrival.admission", "arrival.replica_selection",
                    "arrival.stream_setup", "intake.system_prompt", "intake.tokenization",
                    "cache.prefix_match", "forward.attention", "forward.prefill", "gen.streaming",
                    "loop.fan_out")),
    Symptom("slow_stream", "Fast first token, slow stream", ("forward", "generation"),
            "batch size, KV bytes per sequence, speculation under load, output length",
            ("stream is slow", "answer crawls", "slow tokens", "tpot", "slow stream", "tokens per second"),
            stages=("cache.kv_write", "forward.attention", "forward.decode", "forward.batching",
                    "gen.lm_head", "gen.reasoning_budget", "gen.speculation", "gen.streaming")),
    Symptom("different_answer", "Same prompt, different answer", ("generation",),
            "sampling parameters, batch composition at temperature 0, model and replica",
            ("different answer", "not deterministic", "nondeterministic", "same prompt", "answers differ"),
            stages=("arrival.model_routing", "arrival.replica_selection", "forward.batching", "gen.penalties",
                    "gen.sampling")),
    Symptom("broken_json", "Broken or half-written JSON", ("safety", "generation"),
            "finish reason length / stop / content_filter, whether the stop reason was read",
            ("json broken", "json is cut off", "broken json", "truncated", "half-written", "parse error"),
            stages=("gen.penalties", "gen.constrained", "gen.stop", "safety.stop_reason")),
    Symptom("session_forgets", "Long session forgets a detail", ("loops", "intake"),
            "compaction threshold and pinned items, position of the fact",
            ("forgets", "forgot", "long session", "lost detail", "memory"),
            stages=("intake.context_ordering", "forward.positional", "forward.attention_variant",
                    "loop.compaction")),
    Symptom("wrong_source", "Right fact, wrong source", ("intake",),
            "chunk labels and delimiter scheme",
            ("wrong source", "wrong citation", "cites the wrong", "attribution"),
            stages=("intake.evidence_formatting",)),
    Symptom("cost_after_deploy", "Cost up after a deploy", ("cache", "meters"),
            "hit rate by deploy, the prompt field that moved up",
            ("cost up", "bill", "expensive", "cost jumped", "after deploy", "cache hit rate dropped"),
            stages=("intake.system_prompt", "cache.prefix_match", "meters.cache_accounting")),
    Symptom("agent_loops", "Agent loops, bill runs up", ("loops",),
            "step, token, spend and wall caps; repeated identical tool calls",
            ("agent loops", "looping", "loop", "runaway", "ran overnight"),
            stages=("loop.tool_dispatch", "loop.fan_out", "loop.budget")),
    Symptom("refusal_after_text", "Text shown, then a refusal", ("safety",),
            "streaming moderation aborts and retracted characters",
            ("refusal", "vanished", "retracted", "text disappeared"),
            stages=("safety.moderation",)),
    Symptom("degrades_under_traffic", "Fine in dev, bad under traffic", ("arrival",),
            "admission thresholds, goodput (requests inside the SLO)",
            ("under load", "under traffic", "429", "queue", "shed", "goodput"),
            stages=("arrival.admission", "cache.block_allocation")),
    Symptom("mangled_text", "Emoji or non-Latin text mangled mid-stream", ("generation",),
            "detokenizer hold-back, replacement characters, skip_special_tokens",
            ("emoji", "mangled", "garbled", "replacement character", "non-latin", "cjk"),
            stages=("gen.detokenization",)),
    Symptom("below_model_card", "Open model scores below its card", ("intake",),
            "chat template differs from the model's own",
            ("below its card", "worse than benchmark", "chat template", "scores below", "quality is low"),
            stages=("intake.chat_template",)),
    Symptom("invisible_characters", "Silent: invisible characters", ("intake",),
            "normalization counts, token inflation, cache misses from invisible differences",
            ("invisible", "zero-width", "nbsp", "unicode", "hidden characters"), silent=True,
            stages=("intake.normalization", "intake.tokenization", "safety.injection")),
    Symptom("eviction_under_load", "Silent: eviction under load", ("cache",),
            "hit rate against pool pressure, evictions of blocks later needed",
            ("eviction", "evicted", "cache pressure", "pool full"), silent=True,
            stages=("cache.prefix_match", "cache.block_allocation", "cache.eviction", "cache.host_offload")),
    Symptom("detokenizer_window", "Silent: detokenizer window", ("generation",),
            "replacement characters emitted then corrected, chopped stop strings",
            ("detokenizer", "stop string chopped", "hold-back"), silent=True,
            stages=("gen.detokenization",)),
    Symptom("early_end", "Silent: answers end early with finish reason stop", ("generation",),
            "end kind, the stop string's class and where it fired, the characters before the cut",
            ("ends early", "cut short", "stops early", "stop sequence", "stop string", "answer is short"),
            silent=True,
            stages=("gen.stop",)),
    Symptom("intake_transform", "Silent: the model read other characters than the app sent", ("intake",),
            "classes of characters the normal form or strip changed (powers, fractions, glued words)",
            ("nfkc", "normalization", "superscript", "folded", "model read", "changed the prompt"), silent=True,
            stages=("intake.normalization",)),
    Symptom("failed_calls", "Calls fail: errors, timeouts, refused connections", ("arrival", "intake", "generation"),
            "error kind, HTTP status and message, the stage the failure belongs to",
            ("error", "errors", "failed", "failing", "fails", "404", "500", "timeout", "timed out",
             "connection refused", "model not found", "unknown model", "exception", "not found"),
            stages=("arrival.connection", "arrival.admission", "arrival.model_routing",
                    "arrival.stream_setup", "intake.tokenization", "gen.streaming")),
)

_BY_ID = {s.id: s for s in SYMPTOMS}


def get_symptom(symptom_id: str) -> Symptom:
    try:
        return _BY_ID[symptom_id]
    except KeyError:
        raise KeyError(f"unknown symptom {symptom_id!r}; one of: {', '.join(_BY_ID)}") from None


def search_symptoms(text: str) -> list[Symptom]:
    """Rank symptoms by how well free text matches their phrases (best first; empty when nothing fits)."""
    words = set(text.lower().replace("-", " ").split())
    query = " ".join(text.lower().split())
    scored: list[tuple[float, int, Symptom]] = []
    for i, s in enumerate(SYMPTOMS):
        score = 0.0
        for phrase in s.phrases + (s.title.lower(), s.id.replace("_", " ")):
            if phrase in query:
                score += 3 + len(phrase.split())
            overlap = words & set(phrase.split())
            score += len(overlap) / max(1, len(phrase.split()))
        if score > 0.6:
            scored.append((score, -i, s))
    scored.sort(reverse=True)
    return [s for _, _, s in scored]
