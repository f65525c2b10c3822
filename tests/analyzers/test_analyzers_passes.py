"""The ``passes`` view is the one answer to "which side of a pass counts": a store holding passes seen by
the client only, by the server only, and by both, gives the same hit rate per deploy in `llmtrace check`,
in `llmtrace diagnose` and in the explorer's Cache tab."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmtrace.cli import main
from llmtrace.tracer.storage.store import read_connection, write_connection

T0 = 1_780_000_000_000_000_000

# (deploy, kind, client (prompt, cached), server (prompt, cached)); the server's numbers win when both
# exist (the client's here are provider-reported nonsense on purpose), the client's when the server is
# not ours. A joined pass's server span carries the server's own version, not the app's deploy.
PASSES = [
    *[("v1", "both", (200, 0), (200, 180))] * 2, *[("v1", "client", (100, 90), None)] * 2,
    *[("v1", "server", None, (100, 80))] * 2,
    *[("v2", "both", (200, 200), (200, 20))] * 2, *[("v2", "client", (100, 10), None)] * 2,
    *[("v2", "server", None, (100, 30))] * 2,
    # a provider (or instrumentation) that reports no cached tokens: in no hit rate, not a 0% that drags it down
    *[("v1", "unknown", (300, None), None)] * 2, *[("v2", "unknown", (300, None), None)] * 2,
]
EXPECTED = {"v1": 700 / 800, "v2": 120 / 800}


def _span(trace: str, span: str, parent: str | None, side: str, deploy: str | None, t: int,
          usage: tuple[int, int | None], finish: object) -> list[object]:
    attrs = {"llmtrace.side": side, "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
             "gen_ai.usage.input_tokens": usage[0], "gen_ai.usage.cache_read.input_tokens": usage[1],
             "gen_ai.usage.output_tokens": 5, "gen_ai.response.finish_reasons": finish,
             "llmtrace.ttft_ms": 50.0 + usage[0] - (usage[1] or 0)}
    if usage[1] is None:
        del attrs["gen_ai.usage.cache_read.input_tokens"]
    return [trace, span, parent, "chat m", "client" if side == "client" else "server", "chat", None, None,
            "app" if side == "client" else "llmtrace-serve", deploy, t, t + 5_000_000, 5.0, "ok", None,
            json.dumps(attrs), "{}", None]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("passes") / "mixed.duckdb"
    rows = []
    for i, (deploy, _kind, client, server) in enumerate(PASSES):
        trace, t = f"{i:032x}", T0 + i * 1_000_000_000
        if client is not None:
            rows.append(_span(trace, f"c{i:015d}", None, "client", deploy, t, client, ["stop"]))
        if server is not None:
            parent = f"c{i:015d}" if client is not None else f"x{i:015d}"  # a foreign client's span id
            own = "srv-9" if client is not None else deploy
            # finish reasons in the spellings foreign instrumentations store: a list-like string, Anthropic's
            rows.append(_span(trace, f"s{i:015d}", parent, "server", own, t + 1_000_000, server,
                              '["length"]' if i % 2 else "max_tokens"))
    with write_connection(path) as conn:
        conn.executemany(f"INSERT INTO spans VALUES ({', '.join('?' * 18)})", rows)
    return path


def test_passes_view_joins_the_sides_and_takes_the_trace_deploy(mixed: Path) -> None:
    with read_connection(mixed) as conn:
        rows = conn.execute("""SELECT observed_by, deploy, count(*), sum(prompt_tokens), sum(cached_tokens),
                                      list(DISTINCT finish_reason)
                               FROM passes GROUP BY ALL ORDER BY ALL""").fetchall()
        assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 20  # the per-span view stays
        unknown = conn.execute("SELECT list(DISTINCT hit_ratio) FROM passes WHERE prompt_tokens = 300").fetchone()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("both", "v1", 2), ("both", "v2", 2), ("client", "v1", 4), ("client", "v2", 4),
        ("server", "v1", 2), ("server", "v2", 2)]
    assert unknown[0] == [None]  # no cached tokens reported: no ratio, not 0.0
    both_v2 = rows[1]
    assert (both_v2[3], both_v2[4]) == (400, 40)  # the server's counts, not the client's
    assert rows[0][5] == ["length"] and rows[2][5] == ["stop"]  # '["length"]' and max_tokens normalised


def test_check_diagnose_and_cache_tab_agree_per_deploy(mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmtrace.tui.data.store_reader import StoreReader

    assert main(["check", "--db", str(mixed), "--deploy", "v2", "--baseline-deploy", "v1"]) == 1
    out = capsys.readouterr().out
    m = re.search(r"cache hit rate: ([\d.]+)% \(baseline ([\d.]+)%", out)
    assert m is not None, out
    assert float(m.group(1)) == pytest.approx(100 * EXPECTED["v2"], abs=0.05)
    assert float(m.group(2)) == pytest.approx(100 * EXPECTED["v1"], abs=0.05)

    assert main(["diagnose", "--db", str(mixed), "--json", "--symptom", "cost_after_deploy"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    ev = {e["label"]: e["value"] for f in found for e in f["evidence"]}
    assert ev["hit rate at v1"] == pytest.approx(EXPECTED["v1"], abs=1e-3)
    assert ev["hit rate at v2"] == pytest.approx(EXPECTED["v2"], abs=1e-3)

    report = StoreReader(mixed).cache_report()
    tab = {d.deploy: d.hit_rate for d in report.costs}
    assert tab["v1"] == pytest.approx(EXPECTED["v1"]) and tab["v2"] == pytest.approx(EXPECTED["v2"])
    # the chart's buckets add up to the same rate over the whole store
    whole = sum(b.cached_tokens for b in report.buckets) / sum(b.prompt_tokens for b in report.buckets)
    assert whole == pytest.approx((700 + 120) / 1600)

    from llmtrace.report.data import ReportData

    with read_connection(mixed) as conn:
        page = {r["deploy"]: r["hit_rate"] for r in ReportData(conn).open().by_deploy()}
    assert page["v1"] == pytest.approx(EXPECTED["v1"]) and page["v2"] == pytest.approx(EXPECTED["v2"])
