"""Symptom id -> analyzer, one per row of the symptom table (twelve symptoms, three silent failures)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmtrace.analyzers.registry import Analyzer


def build_analyzers() -> dict[str, Analyzer]:
    from llmtrace.analyzers.agent_loops import AgentLoops
    from llmtrace.analyzers.below_model_card import BelowModelCard
    from llmtrace.analyzers.broken_json import BrokenJson
    from llmtrace.analyzers.cost_after_deploy import CostAfterDeploy
    from llmtrace.analyzers.degrades_under_traffic import DegradesUnderTraffic
    from llmtrace.analyzers.detokenizer_window import DetokenizerWindow
    from llmtrace.analyzers.different_answer import DifferentAnswer
    from llmtrace.analyzers.early_end import EarlyEnd
    from llmtrace.analyzers.eviction_under_load import EvictionUnderLoad
    from llmtrace.analyzers.failed_calls import FailedCalls
    from llmtrace.analyzers.intake_transform import IntakeTransform
    from llmtrace.analyzers.invisible_characters import InvisibleCharacters
    from llmtrace.analyzers.mangled_text import MangledText
    from llmtrace.analyzers.refusal_after_text import RefusalAfterText
    from llmtrace.analyzers.session_forgets import SessionForgets
    from llmtrace.analyzers.slow_first_token import SlowFirstToken
    from llmtrace.analyzers.slow_stream import SlowStream
    from llmtrace.analyzers.wrong_source import WrongSource
    from llmtrace.tracer.registry.symptoms import SYMPTOMS

    table: dict[str, Analyzer] = {a.symptom: a for a in (
        SlowFirstToken(), SlowStream(), DifferentAnswer(), BrokenJson(), SessionForgets(), WrongSource(),
        CostAfterDeploy(), AgentLoops(), RefusalAfterText(), DegradesUnderTraffic(), MangledText(),
        BelowModelCard(), InvisibleCharacters(), EvictionUnderLoad(), DetokenizerWindow(), EarlyEnd(),
        IntakeTransform(), FailedCalls(),
    )}
    # keep the table's order, and fail loudly if a symptom row has no analyzer
    missing = [s.id for s in SYMPTOMS if s.id not in table]
    if missing:
        raise ValueError(f"symptoms without an analyzer: {missing}")
    return {s.id: table[s.id] for s in SYMPTOMS}
