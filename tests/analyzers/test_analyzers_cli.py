"""diagnose / check command lines, report formats, the finding record, the synthetic store's planted
causes, Parquet input, and analyzers over an empty store."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import duckdb
import pytest

from llmtrace.analyzers import ANALYZERS, Evidence, Finding, run_analyzers
from llmtrace.analyzers.core.finding import Severity
from llmtrace.analyzers.diagnose.diagnose_cli import choose_symptoms, parse_since
from llmtrace.analyzers.gate.baseline import Metrics
from llmtrace.analyzers.gate.check_cli import compare
from llmtrace.cli import main
from llmtrace.tracer.storage.store import parquet_connection, read_connection, write_connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_store import PLANTED, make_store  # noqa: E402


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("syn") / "syn.duckdb", passes=2000, seed=1)


def test_every_symptom_row_has_an_analyzer() -> None:
    from llmtrace.tracer.registry.symptoms import SYMPTOMS

    assert list(ANALYZERS) == [s.id for s in SYMPTOMS] and len(ANALYZERS) == 18


def test_synthetic_store_planted_causes_are_found_at_their_stage(synthetic: Path) -> None:
    with read_connection(synthetic) as conn:
        assert conn.execute("SELECT count(*) FROM spans").fetchone()[0] == 2000 * 40
        found = run_analyzers(conn)
    for symptom, stage in PLANTED.items():
        assert any(symptom in (f.symptoms or (f.symptom,)) and stage in (f.stages or (f.stage,)) for f in found), (symptom, stage)
    assert found == sorted(found, key=Finding.sort_key)


def test_an_injection_ranks_first_among_equally_severe_findings() -> None:
    """A cache loss measures the time it cost and an injection costs none; at the same severity the injection
    (a security problem) still comes first, and severity still comes before it."""
    def finding(stage: str, severity: Severity, loss_ms: float) -> Finding:
        return Finding("s", "p", stage, severity, stage, "", (), (), "", 0.5, loss_ms=loss_ms)

    cache, injection = finding("cache.prefix_match", "critical", 900.0), finding("safety.injection", "critical", 0.0)
    assert [f.stage for f in sorted([cache, injection], key=Finding.sort_key)] == ["safety.injection",
                                                                                    "cache.prefix_match"]
    mild = finding("safety.injection", "warning", 0.0)
    assert sorted([mild, cache], key=Finding.sort_key)[0] is cache


def test_analyzers_on_an_empty_store_find_nothing(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    with write_connection(db):
        pass
    with read_connection(db) as conn:
        assert run_analyzers(conn) == []


def test_parquet_export_gives_the_same_findings(synthetic: Path, tmp_path: Path) -> None:
    out = tmp_path / "spans.parquet"
    with read_connection(synthetic) as conn:
        conn.execute(f"COPY (SELECT * FROM spans) TO '{out}' (FORMAT parquet)")
        direct = [(f.symptom, f.stage, f.title) for f in run_analyzers(conn)]
    conn = parquet_connection(str(out))
    try:
        via_parquet = [(f.symptom, f.stage, f.title) for f in run_analyzers(conn)]
    finally:
        conn.close()
    assert via_parquet == direct


def test_since_restricts_the_window(synthetic: Path) -> None:
    with read_connection(synthetic) as conn:
        assert run_analyzers(conn, since_ns=parse_since("1s")) == []
        assert run_analyzers(conn, ["broken_json"], since_ns=0)


def test_parse_since() -> None:
    assert parse_since(None) is None
    assert parse_since("2h", now_ns=10 * 3600 * 10**9) == 8 * 3600 * 10**9
    assert parse_since("1700000000000000000") == 1700000000000000000
    with pytest.raises(ValueError):
        parse_since("yesterday")


def test_free_text_maps_to_symptoms() -> None:
    assert choose_symptoms(None, "the first token is slow")[0] == "slow_first_token"  # type: ignore[index]
    assert choose_symptoms(None, "json is cut off")[0] == "broken_json"  # type: ignore[index]
    assert choose_symptoms(None, "it forgot my order number")[0] == "session_forgets"  # type: ignore[index]
    with pytest.raises(ValueError):
        choose_symptoms(None, "zzzz qqqq")
    with pytest.raises(ValueError):
        choose_symptoms(["no_such_symptom"], None)


def test_finding_is_a_checked_read_only_record() -> None:
    ev = Evidence("hit rate", 0.5, "", ("a" * 32,), baseline=0.9)
    f = Finding("slow_first_token", "cache", "cache.prefix_match", "warning", "t", "s", (ev,), ("a" * 32,), "n", 0.4)
    assert json.loads(json.dumps(f.to_dict()))["evidence"][0]["baseline"] == 0.9
    with pytest.raises(ValueError):
        Finding("x", "cache", "cache.prefix_match", "bad", "t", "s", (), (), "n", 0.1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        f.stage = "gen.stop"  # type: ignore[misc]


def test_diagnose_cli_json_and_errors(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--db", str(synthetic), "--search", "json is cut off", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["symptoms"][0] == "broken_json" and out["findings"][0]["stage"] == "gen.stop"
    assert main(["diagnose", "--db", str(synthetic), "--symptom", "nope"]) == 2
    assert "unknown symptom" in capsys.readouterr().err
    assert main(["diagnose", "--db", str(tmp_path / "missing.duckdb")]) == 1
    assert "no store" in capsys.readouterr().err
    assert main(["diagnose", "--db", str(synthetic), "--symptom", "broken_json"]) == 0
    text = capsys.readouterr().out  # piped: plain text, phase -> stage -> evidence -> next
    assert "where: Generation → gen.stop" in text and "next:" in text and "\x1b[" not in text


def test_check_baseline_roundtrip_and_formats(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "baseline.json"
    assert main(["check", "--db", str(synthetic), "--deploy", "v1", "--save-baseline", str(base)]) == 0
    saved = json.loads(base.read_text())
    assert saved["deploy"] == "v1" and saved["hit_rate"] > 0.5
    capsys.readouterr()
    assert main(["check", "--db", str(synthetic), "--deploy", "v1", "--baseline", str(base)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["check", "--db", str(synthetic), "--deploy", "v2", "--baseline", str(base), "--format", "github"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("::error title=llmtrace check%3A cache hit rate regressed::")
    assert "cache.prefix_match" in out and "%0A" in out
    xml_path = tmp_path / "check.xml"
    assert main(["check", "--db", str(synthetic), "--baseline-deploy", "previous", "--ttft", "--cost",
                 "--format", "junit", "--output", str(xml_path)]) == 1
    suite = ET.parse(xml_path).getroot()
    assert suite.get("tests") == "4" and int(suite.get("failures") or 0) >= 1
    failure = suite.find("testcase[@name='cache_hit_rate']/failure")
    assert failure is not None and "cache.prefix_match" in (failure.text or "")


def test_check_cannot_run_without_passes_or_baseline(tmp_path: Path, synthetic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "empty.duckdb"
    with write_connection(db):
        pass
    assert main(["check", "--db", str(db), "--save-baseline", str(tmp_path / "b.json")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{\"version\": 7}")
    assert main(["check", "--db", str(synthetic), "--baseline", str(bad)]) == 2
    assert "not an llmtrace baseline" in capsys.readouterr().err
    assert main(["check", "--db", str(synthetic), "--deploy", "v2", "--baseline-deploy", "v9"]) == 2


def test_compare_thresholds() -> None:
    base = Metrics("v1", 10, 0.80, 100.0, 200.0, 0.010)
    same = compare(Metrics("v2", 10, 0.76, 110.0, 230.0, 0.0105), base, ttft=True, cost=True)
    assert all(v.ok for v in same)
    worse = compare(Metrics("v2", 10, 0.70, 130.0, 200.0, 0.02), base, ttft=True, cost=True)
    assert [v.metric for v in worse if not v.ok] == ["cache_hit_rate", "ttft_p50_ms", "cost_per_request_usd"]
    skipped = compare(Metrics("v2", 10, None, None, None, None), base, ttft=True)
    assert all(v.ok and v.skipped for v in skipped)
    with pytest.raises(ValueError):
        compare(base, base, max_hit_drop=-1)


def test_a_ttft_rise_must_be_beyond_resampling_noise_to_fail() -> None:
    import random

    rng = random.Random(5)
    base_s = tuple(rng.lognormvariate(3.0, 0.6) for _ in range(12))  # ~20 ms, as noisy as a shared machine
    noisy = tuple(v * 1.35 for v in (rng.lognormvariate(3.0, 0.6) for _ in range(12)))
    slower = tuple(v * 3.0 for v in (rng.lognormvariate(3.0, 0.15) for _ in range(40)))

    def metrics(sample: tuple[float, ...]) -> Metrics:
        s = sorted(sample)
        return Metrics("v", len(s), 0.9, s[len(s) // 2], s[int(0.95 * (len(s) - 1))], None, ttft_sample=sample)

    base = metrics(base_s)
    noise = [v for v in compare(metrics(noisy), base, ttft=True) if v.metric.startswith("ttft_")]
    assert any(v.current > v.baseline * 1.2 for v in noise)  # the point estimates alone would fail the build
    assert all(v.ok for v in noise), [(v.metric, v.current, v.baseline, v.limit) for v in noise]
    real = {v.metric: v for v in compare(metrics(slower), base, ttft=True)}
    assert not real["ttft_p50_ms"].ok and "90% interval" in real["ttft_p50_ms"].limit
    assert all(v.inconclusive or not v.interval or v.interval[1] <= 1.2 for v in noise)  # abstains, not passes


def test_check_reports_escape_and_parse() -> None:
    from llmtrace.analyzers.gate.check_report import Verdict, github, junit

    v = [Verdict("cache_hit_rate", "cache hit rate", 0.1, 0.9, "allowed drop 5 points", False)]
    assert "%25" in github(v, "h").splitlines()[0]
    root = ET.fromstring(junit(v, "a <summary> & more"))
    assert root.get("failures") == "1"


def test_duckdb_views_match_passes_materialization(synthetic: Path) -> None:
    """The shared passes table an analyzer run builds has the same rows as the documented view."""
    from llmtrace.analyzers.core.query import Query
    from llmtrace.tracer.storage.views import PASS_COLUMNS

    cols = ", ".join(PASS_COLUMNS)
    with read_connection(synthetic) as conn:
        q = Query(conn)
        try:
            a = conn.execute(f"SELECT {cols} FROM {q.passes} ORDER BY span_id").fetchall()
        finally:
            q.release()
        b = conn.execute(f"SELECT {cols} FROM passes ORDER BY span_id").fetchall()
    assert a == b and len(a) == 2000  # one row per logical pass: the client's and server's spans joined
    assert isinstance(duckdb.__version__, str)


def test_rich_rendering_on_a_terminal(synthetic: Path) -> None:
    import io

    from rich.console import Console

    from llmtrace.analyzers.core.render import print_findings

    with read_connection(synthetic) as conn:
        found = run_analyzers(conn, ["slow_first_token"])
    buf = io.StringIO()
    print_findings(found, Console(file=buf, force_terminal=True, width=120, color_system=None))
    text = buf.getvalue()
    assert "Cache & reuse → cache.prefix_match" in text and "next:" in text and "evidence" in text
