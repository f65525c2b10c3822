"""The stage registry is the one source of truth: complete, ordered, consistent, and its docs are fresh."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from llmtrace.tracer import PHASES, STAGES, SYMPTOMS, Stage, get_stage, search_symptoms
from llmtrace.tracer.cli.stages import render_markdown
from llmtrace.tracer.registry.stages import UnknownStageError, explained_symptoms, stages_in_phase
from llmtrace.tracer.registry.symptoms import Symptom

ROOT = Path(__file__).resolve().parents[2]


def test_42_stages_in_8_phases_in_pipeline_order() -> None:
    assert len(STAGES) == 42
    assert [p.id for p in PHASES] == ["arrival", "intake", "cache", "forward", "generation", "loops", "safety", "meters"]
    assert [len(stages_in_phase(p.id)) for p in PHASES] == [5, 6, 5, 9, 9, 4, 3, 1]
    # phases never go backwards along the pipeline
    order = {p.id: p.order for p in PHASES}
    assert [order[s.phase] for s in STAGES] == sorted(order[s.phase] for s in STAGES)
    assert STAGES[0].id == "arrival.connection" and STAGES[-1].id == "meters.cache_accounting"


def test_every_stage_is_described_and_has_boundary_values() -> None:
    symptom_ids = {s.id for s in SYMPTOMS}
    for s in STAGES:
        assert s.id.split(".")[0] in {"arrival", "intake", "cache", "forward", "gen", "loop", "safety", "meters"}
        assert s.description and s.goes_wrong and s.values, s.id
        assert set(s.symptoms) <= symptom_ids, (s.id, set(s.symptoms) - symptom_ids)
        names = [v.name for v in s.values]
        assert len(names) == len(set(names)), s.id
        for v in s.values:
            assert v.meaning, (s.id, v.name)
            assert v.semconv == v.name.startswith(("gen_ai.", "server.", "service.")), (s.id, v.name)


def test_every_symptom_is_explained_by_some_stage() -> None:
    explained = {sym for s in STAGES for sym in s.symptoms}
    assert {s.id for s in SYMPTOMS} == explained
    # the source page's twelve symptoms and three silent failures, and two silent ones of issue 35 (early_end,
    # intake_transform)
    assert len(SYMPTOMS) == 18 and sum(s.silent for s in SYMPTOMS) == 5


def test_a_stages_symptoms_come_from_the_symptom_rows_alone() -> None:
    """The stage-symptom link is written once, in the symptom table (``Symptom.stages``): every stage's
    ``symptoms`` is exactly the rows naming it, in the table's order, and the catalog spells none."""
    order = [sym.id for sym in SYMPTOMS]
    for stage in STAGES:
        assert stage.symptoms == tuple(sym.id for sym in SYMPTOMS if stage.id in sym.stages), stage.id
        assert list(stage.symptoms) == sorted(stage.symptoms, key=order.index), stage.id
    assert get_stage("cache.prefix_match").symptoms == ("slow_first_token", "cost_after_deploy",
                                                        "eviction_under_load")
    # a new symptom row is enough to show on its stage
    probe = Symptom("probe", "Probe", ("cache",), "x", ("probe",), stages=("cache.eviction",))
    linked = {s.id: s.symptoms for s in explained_symptoms(_bare(STAGES), (*SYMPTOMS, probe))}
    assert linked["cache.eviction"] == ("eviction_under_load", "probe")
    assert "probe" not in linked["cache.prefix_match"]


def test_a_symptom_row_naming_no_stage_or_a_catalog_spelling_symptoms_fails() -> None:
    typo = Symptom("probe", "Probe", ("cache",), "x", ("probe",), stages=("cache.evictionn",))
    with pytest.raises(ValueError, match="unknown stage.*cache.evictionn"):
        explained_symptoms(_bare(STAGES), (typo,))
    # the loaded stages carry their symptoms: fed back as a catalog they are a second source, refused
    with pytest.raises(ValueError, match="lists its symptoms in the catalog"):
        explained_symptoms(STAGES, SYMPTOMS)


def _bare(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    return tuple(replace(s, symptoms=()) for s in stages)


def test_unknown_stage_fails_loudly() -> None:
    with pytest.raises(UnknownStageError, match="cache.prefix_matchh"):
        get_stage("cache.prefix_matchh")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("my first token is slow", "slow_first_token"), ("the json is cut off", "broken_json"),
     ("cost jumped after deploy", "cost_after_deploy"), ("emoji mangled mid-stream", "mangled_text")],
)
def test_symptom_search(text: str, expected: str) -> None:
    assert search_symptoms(text)[0].id == expected


def test_docs_stages_md_is_generated_from_the_registry() -> None:
    committed = (ROOT / "docs" / "stages.md").read_text()
    assert committed == render_markdown(), "docs/stages.md is stale: run `llmtrace stages --markdown > docs/stages.md`"


def test_stages_cli_json_and_phase_filter() -> None:
    out = subprocess.run([sys.executable, "-m", "llmtrace.cli", "stages", "--json", "--phase", "cache"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert [d["id"] for d in data] == [s.id for s in STAGES if s.phase == "cache"]
    bad = subprocess.run([sys.executable, "-m", "llmtrace.cli", "stages", "--phase", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown phase" in bad.stderr
