"""Passages labelled by an index ("Note 3:", "FAQ 2)", "Entry 1 —") seen through a foreign instrumentation are
labelled, as through llmtrace's own middleware: ``diagnose`` gives the app no finding above info, while the
same passages pasted without labels are still ``intake.evidence_formatting``'s (critical). Real OpenInference
instrumentation of the openai SDK, real ``llmtrace serve`` (tiny), real ``llmtrace collect``, ``diagnose
--json`` as a subprocess."""

from __future__ import annotations

from typing import Any

import pytest
from collector_helpers import ForeignApp, diagnose_foreign
from testkit import RunningServer

pytestmark = pytest.mark.slow

DESK = ("You are the help desk of the Quillmark lending library.\n\nRules:\n1. Always cite the note you used.\n"
        "2. Never waive a fine above ten pounds.\n3. Keep each reply to two short sentences.")
KB = ["Fines are capped at ten pounds per item and are waived for members under sixteen.",
      "Study rooms can be booked up to seven days ahead at the Eastside and Northgate branches.",
      "Lost items are charged at the replacement price plus a two pound processing fee.",
      "A loan can be renewed three times unless another member has reserved the item."]
STYLES = {"note": "Note {n}: {p}", "faq": "FAQ {n}) {p}", "entry": "Entry {n} — {p}", "plain": "{p}"}


def _calls(fmt: str) -> list[dict[str, Any]]:
    out = []
    for i in range(4):
        ctx = "\n".join(fmt.format(n=k + 1, p=KB[(i + k) % 4]) for k in range(3))
        out.append({"messages": [{"role": "system", "content": DESK},
                                 {"role": "user", "content": f"Relevant notes:\n{ctx}\n\nCan I renew it again?"}],
                    "max_tokens": 4, "stream": i % 2 == 1})
    return out


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    apps = {style: ForeignApp("openinference", _calls(fmt)) for style, fmt in STYLES.items()}
    return diagnose_foreign(tmp_path_factory.mktemp("evidence-labels-foreign"), tiny_server.base_url + "/v1", apps)


@pytest.mark.parametrize("style", [s for s in STYLES if s != "plain"])
def test_index_labelled_passages_raise_nothing(found: dict[str, list[dict[str, Any]]], style: str) -> None:
    assert [(f["severity"], f["stage"], f["title"]) for f in found[style] if f["severity"] != "info"] == []


def test_the_same_passages_without_labels_are_still_found(found: dict[str, list[dict[str, Any]]]) -> None:
    top = found["plain"][0]
    assert (top["stage"], top["severity"]) == ("intake.evidence_formatting", "critical"), found["plain"]
    assert "without labels" in top["title"]
