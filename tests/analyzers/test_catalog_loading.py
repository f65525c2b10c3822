"""The analyzers are loaded from the symptom registry: each symptom row is answered by
``analyzers/symptoms/<symptom id>.py``, with no hand-kept import list (issue 34)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import llmtrace.analyzers.symptoms as symptoms_pkg
from llmtrace.analyzers.diagnose.catalog import analyzer_for, build_analyzers
from llmtrace.tracer.registry.symptoms import SYMPTOMS


def test_every_symptom_row_has_its_analyzer_in_the_table_order() -> None:
    table = build_analyzers()
    assert list(table) == [s.id for s in SYMPTOMS]
    for symptom, analyzer in table.items():
        assert analyzer.symptom == symptom
        assert callable(analyzer.analyze)


def test_a_new_module_is_found_by_its_symptom_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module dropped beside the others (here: a folder added to the package's path) is all it takes.
    (tmp_path / "probe_symptom.py").write_text(
        "class ProbeSymptom:\n"
        "    symptom = 'probe_symptom'\n"
        "    reads_passes = False\n"
        "    def analyze(self, conn, since_ns=None, query=None):\n"
        "        return []\n"
    )
    monkeypatch.setattr(symptoms_pkg, "__path__", [*symptoms_pkg.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "llmtrace.analyzers.symptoms.probe_symptom", raising=False)
    found = analyzer_for("probe_symptom")
    assert type(found).__name__ == "ProbeSymptom" and found.symptom == "probe_symptom"


def test_a_row_without_a_module_names_the_file_to_write() -> None:
    with pytest.raises(ValueError, match=r"analyzers/symptoms/no_such_symptom\.py"):
        analyzer_for("no_such_symptom")
