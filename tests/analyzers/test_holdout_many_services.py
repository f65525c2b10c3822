"""Hold-out store of several apps (probe s8): one `llmtrace serve` traced by four apps, two of which put a
volatile value at the top of their system prompt (a clock, a request uuid). `llmtrace diagnose` over the
whole store, no --service, must weigh each app's cache loss against that app's own traffic, as `--service`
would, and keep the two apps' windows apart: diluted by the clean apps' tokens the two read as one warning
(or nothing). The twin: the same four apps with the values left out. The real OpenAI SDK through
``instrument()``, the real backend, ``llmtrace diagnose --json``.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import analyzers_live as live
import pytest

import llmtrace
from llmtrace.cli import main

DESKS = {
    "quotes": "You price removals for Halden Movers. Ask for the number of rooms and the floor, quote in kroner. ",
    "tracking": "You report where a Halden Movers van is. Give the depot and the hour, never the driver's phone. ",
    "claims": "You take damage claims for Halden Movers. Ask for photos and the inventory number of each item. ",
    "careers": "You answer questions about jobs at Halden Movers. Mention the lifting course and the shifts. ",
}


def _app(srv: object, db: Path, name: str, calls: int, head: object) -> None:
    llmtrace.init(db=db, service_name=name, capture="hashes", strict=True)
    try:
        c = live.client(srv)
        for i in range(calls):
            c.chat.completions.create(model="tiny", temperature=0, max_tokens=2, messages=[
                {"role": "system", "content": f"{head(i) if callable(head) else ''}{DESKS[name] * 4}"},
                {"role": "user", "content": f"Question {i} from customer H-{400 + i}."}])
    finally:
        llmtrace.shutdown()


@pytest.mark.parametrize("planted", [True, False], ids=["volatile", "clean"])
def test_each_apps_window_is_weighed_against_its_own_traffic(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             planted: bool) -> None:
    db = tmp_path / "t.duckdb"
    srv = live.server()
    t0 = dt.datetime(2026, 12, 1, 23, 0, 0)
    clock = (lambda i: f"Now {t0 + dt.timedelta(seconds=41 * i):%Y-%m-%d %H:%M:%S}. ") if planted else None
    rid = (lambda i: f"request {uuid.UUID(int=7919 * i + 1)}\n") if planted else None
    _app(srv, db, "quotes", 30, None)
    _app(srv, db, "tracking", 5, clock)
    _app(srv, db, "claims", 30, None)
    _app(srv, db, "careers", 5, rid)
    capsys.readouterr()
    assert main(["diagnose", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    cache = [f for f in found if f["stage"] == "cache.prefix_match" and f["severity"] != "info"]
    if not planted:
        assert not cache, [(f["severity"], f["title"]) for f in cache]
        return
    titles = [f["title"] for f in cache]
    # each app's window alone, critical: it re-prefilled most of that app's prompt tokens
    for app, kind in (("tracking", "timestamp"), ("careers", "uuid")):
        mine = [f for f in cache if f["title"].endswith(f"(service {app})")]
        assert len(mine) == 1 and mine[0]["severity"] == "critical", titles
        assert kind in mine[0]["title"] and "of the system" in mine[0]["title"], titles
    assert found[0] in cache, [(f["severity"], f["stage"], f["title"]) for f in found]
