"""The TTFT split's components name registry stages only, and count every stage of the intake phase.

A hand-typed component list once held "intake.evidence_format" (the stage is intake.evidence_formatting),
so ``ttft_breakdown`` never counted evidence formatting; the list is now built from the registry."""

from __future__ import annotations

from llmtrace.tracer.registry.stages import STAGES, is_stage, stages_in_phase
from llmtrace.tracer.storage.time_views import TTFT_COMPONENTS, ttft_breakdown_select


def test_every_component_stage_is_a_registry_stage() -> None:
    listed = [stage for stages in TTFT_COMPONENTS.values() for stage in stages]
    assert [s for s in listed if not is_stage(s)] == []
    assert len(listed) == len(set(listed)), "a stage counted in two components"


def test_every_intake_stage_is_counted() -> None:
    intake = set(TTFT_COMPONENTS["intake"])
    assert {s.id for s in stages_in_phase("intake")} <= intake
    assert "intake.evidence_formatting" in intake


def test_the_breakdown_query_names_each_component_stage() -> None:
    sql = ttft_breakdown_select()
    for stages in TTFT_COMPONENTS.values():
        for stage in stages:
            assert repr(stage) in sql
    # the stages before the first token that no component holds are the ones the split leaves to "other"
    before_first_token = {s.id for s in STAGES if s.phase in {"intake", "cache", "forward"}}
    counted = {stage for stages in TTFT_COMPONENTS.values() for stage in stages}
    assert before_first_token - counted <= {"cache.kv_write", "forward.attention_variant", "forward.batching"}


def test_each_stage_names_its_ttft_part_in_the_registry() -> None:
    from llmtrace.tracer.storage.time_views import TTFT_PARTS

    known = {"queue", "batching", "intake", "routing", "cache_lookup", "prefill", "first_token"}
    assert {s.ttft_part for s in STAGES} - {""} == known
    assert TTFT_PARTS["queue"] == ("arrival.admission",) and TTFT_PARTS["batching"] == ("forward.batching",)
    assert set(TTFT_PARTS["first_token"]) == {s.id for s in stages_in_phase("generation")}
    sql = ttft_breakdown_select()
    for part, stages in TTFT_PARTS.items():
        assert f"WHEN stage IN ({', '.join(repr(s) for s in stages)}) THEN '{part}'" in sql
