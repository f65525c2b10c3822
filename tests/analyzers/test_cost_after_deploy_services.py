"""Cost up after one app's deploy, in a store several apps trace into (one `llmtrace serve`, a collector's
store): `diagnose` over the whole store, no --service, must compare each app's deploys with that app's own,
as `diagnose --service` does. Both apps tag their releases v1 and v2; the small app's v2 raised max_tokens,
the busy app changed nothing. Pooled by deploy name the busy app's unchanged traffic hides the rise (the
median request did not move). The real OpenAI SDK through ``instrument()``, the real backend,
``llmtrace diagnose --json`` through the CLI's entry point.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import analyzers_live as live
import pytest

import llmtrace
from llmtrace.cli import main

DESKS = {
    "renewals": "You renew loans for the Quillmark lending library. Check the member card first. " * 3,
    "catalogue": "You search the Quillmark catalogue. Give the shelf mark and whether a copy is in. " * 3,
}
ASKS = ["Can I renew The Hobbit again?", "Is Middlemarch on the shelf?", "Where are the atlases kept?"]


def _app(srv: Any, db: Path, service: str, deploy: str, calls: int, max_tokens: int) -> None:
    llmtrace.init(db=db, service_name=service, deploy=deploy, capture="hashes", strict=True)
    try:
        c = live.client(srv)
        for i in range(calls):
            c.chat.completions.create(model="tiny", temperature=0, max_tokens=max_tokens, messages=[
                {"role": "system", "content": DESKS[service]}, {"role": "user", "content": ASKS[i % 3]}])
    finally:
        llmtrace.shutdown()


def _diagnose(db: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json", *args]) == 0
    return list(json.loads(capsys.readouterr().out)["findings"])


def test_one_apps_costlier_deploy_is_found_in_a_store_of_several_apps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    for deploy, renewals_max in (("v1", 4), ("v2", 24)):
        _app(srv, db, "renewals", deploy, 6, renewals_max)
        _app(srv, db, "catalogue", deploy, 24, 4)
    # the app alone, as --service reads it: its v2 asks for longer answers
    alone = [f for f in _diagnose(db, capsys, "--service", "renewals") if f["stage"] == "meters.cache_accounting"]
    assert any("max_tokens 4 → 24" in f["title"] for f in alone), [f["title"] for f in alone]
    # the whole store: the same cause, named for the app whose deploy it was
    cost = [f for f in _diagnose(db, capsys) if f["stage"] == "meters.cache_accounting" and f["severity"] != "info"]
    assert cost, "the renewals app's costlier v2 was not found in the store of both apps"
    (top,) = [f for f in cost if "rose" in f["title"]]
    assert "max_tokens 4 → 24" in top["title"] and top["title"].endswith("(service renewals)"), top["title"]
    assert "gen.stop" in top["stages"] and "--service renewals" in top["next_check"], top
