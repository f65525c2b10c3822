"""The ``passes`` view on ClickHouse (chdb) gives DuckDB's rows over a store traced by real parts: the in-process
tiny server, the OpenAI SDK wrapped by ``instrument()``, chat calls with ``tools=`` cut at ``max_tokens=5``,
streamed and not, several at once (passes that overlap in time), copied into the Collector exporter's
``otel_traces`` as ``llmtrace export`` hands spans over.

The ClickHouse exporter keeps every attribute as a string; the ``spans`` view guesses numbers back. A 16-hex
hash such as ``1234e56789012345`` read as a number is out of range, which makes the whole attributes document
invalid for ClickHouse's JSON parser: every value of that span read NULL, its ``llmtrace.side`` too, so a
server pass span was taken for a client pass of its own and its pass lost the server's values (one cut tool
call fewer on chdb than on DuckDB). One of the passes here sends a prompt whose server-side hash has that
shape (the hash key is this process's, which the in-process server shares), so the test does not wait for it.
"""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("chdb")  # in the dev extra; a checkout without it cannot run ClickHouse at all

from llmtrace.cli import main  # noqa: E402
from llmtrace.tracer.record import capture  # noqa: E402
from llmtrace.tracer.storage.clickhouse import (  # noqa: E402
    SPANS_SELECT,
    SPANS_TABLE,
    connect,
    ensure_views,
    insert_from_parquet_sql,
    map_json_sql,
)
from llmtrace.tracer.storage.store import read_connection  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyzers"))
import analyzers_live as live  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {"host": {"type": "string"}}}}}
    for n, d in (("host_status", "Current health of one hosted server."),
                 ("open_incident", "Open an incident for a host and page the on-call engineer."))]
PASS_SQL = ("SELECT trace_id, client_span_id, server_span_id, observed_by, prompt_tokens, cached_tokens, "
            "finish_reason, side_count FROM (SELECT *, (client_span_id IS NOT NULL)::INT + "
            "(server_span_id IS NOT NULL)::INT AS side_count FROM passes) ORDER BY trace_id, span_id")
# digits, an e, digits: a hex hash that reads as a number past a double's range
_OVERFLOWS = re.compile(r"[1-9][0-9]*e[0-9]{3,}")


def _number_shaped_prompt() -> str:
    """A prompt whose hash on the server's pass span (capture.hash_text of the prompt text, backend/server/intake.py)
    reads as an out-of-range number: about one text in 1,500."""
    for i in range(200_000):
        text = f"Ticket {i}: the web host is down, what now?"
        if _OVERFLOWS.fullmatch(capture.hash_text(text)):
            return text
    raise AssertionError("no prompt with a number-shaped hash in 200,000 tries")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("chlive")
    db = tmp / "live.duckdb"
    srv = live.server()
    with live.store(db, capture="hashes"):
        c = live.client(srv)

        def call(i: int) -> None:
            kw: dict = {"model": srv.model_id, "temperature": 0,
                        "messages": [{"role": "user", "content": f"check web-{i}"}]}
            kw.update({"tools": TOOLS, "max_tokens": 5} if i % 2 == 0 else {"max_tokens": 8})
            if i % 3 == 0:
                for _ in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
                    pass
            else:
                c.chat.completions.create(**kw)

        for i in range(3):
            call(i)
        with ThreadPoolExecutor(4) as pool:  # passes that overlap in time
            list(pool.map(call, range(3, 11)))
        c.completions.create(model=srv.model_id, prompt=_number_shaped_prompt(), max_tokens=5, temperature=0)
    pq = tmp / "spans.parquet"  # the fixture's Parquet, for the test of an older store below
    with read_connection(db) as conn:
        conn.execute(f"COPY (SELECT * FROM spans) TO '{pq}' (FORMAT parquet)")
    url = f"chdb://{tmp / 'ch'}"
    with connect(url) as ch:
        ensure_views(ch, create_table=True)
        ch.raw(insert_from_parquet_sql(str(pq)))
    return db, url


def test_passes_on_chdb_are_duckdbs_row_for_row(pair: tuple[Path, str]) -> None:
    db, url = pair
    with read_connection(db) as conn:
        want = conn.execute(PASS_SQL).fetchall()
        sides = conn.execute("SELECT count(*) FILTER (WHERE side = 'server'), count(*) FROM requests").fetchone()
    with connect(url) as ch:
        ensure_views(ch)
        got = ch.execute(PASS_SQL).fetchall()
        got_sides = ch.execute("SELECT count(*) FILTER (WHERE side = 'server'), count(*) FROM requests").fetchone()
        bad_json = ch.execute("SELECT count(*) FROM spans WHERE NOT isValidJSON(attributes)").fetchone()
    assert len(want) == 12 and {r[3] for r in want} == {"both"}  # every pass seen by both sides
    assert got_sides == sides == (12, 24)
    assert got == want
    assert bad_json == (0,)  # no span's attributes lost to a document ClickHouse cannot parse


def test_diagnose_and_check_on_chdb_say_what_they_say_on_duckdb(pair: tuple[Path, str], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    db, url = pair
    found, numbers = {}, {}
    for where in (["--db", str(db)], ["--store", url]):
        capsys.readouterr()
        assert main(["diagnose", *where, "--json"]) == 0
        found[where[0]] = [(f["stage"], f["severity"], f["title"]) for f in json.loads(capsys.readouterr().out)["findings"]]
        out = tmp_path / f"{where[0][2:]}.json"
        assert main(["check", *where, "--save-baseline", str(out)]) == 0
        b = json.loads(out.read_text())
        numbers[where[0]] = (b["passes"], round(b["hit_rate"], 9), round(b["ttft_p50_ms"], 6),
                             round(b["ttft_p95_ms"], 6), sorted(b["ttft_sample"]), sorted(map(tuple, b["hit_sample"])))
    assert found["--store"] == found["--db"]
    cut = [t for s, _, t in found["--db"] if s == "gen.stop"]
    assert cut and cut[0].startswith("6 tool calls were cut"), cut  # the 6 chat calls with tools=
    (*duck, duck_ttft, duck_hits), (*ch, ch_ttft, ch_hits) = numbers["--db"], numbers["--store"]
    assert ch == duck and duck[0] == 12 and ch_hits == duck_hits
    # the TTFT sample is round(ttft_ms, 2): DuckDB 2.0.1 rounds a double's exact value half away from zero,
    # ClickHouse's round() differs near a tie (23.725, stored as 23.72500000000000142: 23.73 vs 23.72)
    assert ch_ttft == pytest.approx(duck_ttft, abs=0.0101)
    # the gate itself: the chdb store checked against the DuckDB store's baseline finds no regression; twelve
    # passes a side cannot show the hit rate held within 5 points (its 90% interval straddles the allowance),
    # so the gate abstains (exit 3, fbf8940) unless told to pass an abstention
    capsys.readouterr()
    assert main(["check", "--store", url, "--baseline", str(tmp_path / "db.json")]) == 3
    out = capsys.readouterr().out
    assert "FAIL" not in out and "0 regression(s)" in out and "INCONCLUSIVE cache hit rate" in out, out
    assert main(["check", "--store", url, "--baseline", str(tmp_path / "db.json"), "--inconclusive", "pass"]) == 0


def test_hex_hashes_and_numbers_off_the_exporters_map_are_valid_json(tmp_path: Path) -> None:
    """Every 16-hex hash stays its own text (or the same digits as a number), whatever its digits (200,000 of
    them, about 140 shaped like digits-e-digits); numbers as pcommon and orjson write them stay numbers."""
    odd = ["1234e56789012345", "0e12345678901234", "9e999", "1e400"]
    numbers = ["12e+4", "-1.5e-7", "1e+21"]
    hexes = "substring(lower(hex(MD5(toString(number)))), 1, 16)"
    extra = " UNION ALL ".join(f"SELECT '{h}' AS h" for h in (*odd, *numbers))
    with connect(f"chdb://{tmp_path / 'ch'}") as ch:
        ch.raw(f"CREATE TABLE m ENGINE = Memory AS SELECT h, map('k', h) AS a FROM "
               f"(SELECT {hexes} AS h FROM numbers(200000) UNION ALL {extra})")
        j = map_json_sql("a")
        bad, lost, shaped = ch.raw(
            f"SELECT countIf(NOT isValidJSON({j})), "
            f"countIf(JSONExtract({j}, 'k', 'Nullable(String)') != h AND toString(JSONType({j}, 'k')) = 'String'), "
            f"countIf(match(h, '^[1-9][0-9]*e[0-9]+$')) FROM m").to_pylist()[0].values()
        typed = {r["h"]: r["t"] for r in ch.raw(f"SELECT h, toString(JSONType({j}, 'k')) AS t FROM m "
                                                f"WHERE h IN ({', '.join(repr(h) for h in (*odd, *numbers))})").to_pylist()}
    assert bad == 0 and lost == 0 and shaped > 50
    assert {typed[h] for h in odd} == {"String"} and {typed[h] for h in numbers} == {"Double"}, typed


def test_a_store_an_older_mapping_filled_is_repaired_when_opened(pair: tuple[Path, str], tmp_path: Path) -> None:
    """A chdb store whose materialized view still maps with the older rule (numbers with an unsigned exponent,
    overflowing ones too) holds the unreadable span; the next open gives the view this mapping and writes that
    span again, so its passes are DuckDB's."""
    db, _ = pair
    older = SPANS_SELECT.replace(" AND isFinite(toFloat64OrZero(_v))", "").replace("[eE][+-][0-9]+", "[eE][+-]?[0-9]+")
    assert older != SPANS_SELECT and "isFinite" not in older
    with read_connection(db) as conn:
        want = conn.execute(PASS_SQL).fetchall()
    url = f"chdb://{tmp_path / 'ch'}"
    with connect(url) as ch:
        ensure_views(ch, create_table=True)
        ch.raw(f"ALTER TABLE {SPANS_TABLE}_mv MODIFY QUERY {older}")  # as an older llmtrace left it
        ch.raw(insert_from_parquet_sql(str(db.parent / "spans.parquet")))
        # at least the span the fixture made so; the store's other hashes come from this run's key, and now and
        # then one more is shaped like a number too (3 in one clean-clone run)
        (bad,) = ch.execute(f"SELECT count(*) FROM {SPANS_TABLE} WHERE NOT isValidJSON(attributes)").fetchone()
        assert bad >= 1
        assert ch.execute(PASS_SQL).fetchall() != want  # the bug, in place
        spans = ch.execute("SELECT count(*) FROM spans").fetchone()
    with connect(url) as ch:
        ensure_views(ch)  # what every read command does on open
        assert ch.execute(f"SELECT count(*) FROM {SPANS_TABLE} WHERE NOT isValidJSON(attributes)").fetchone() == (0,)
        assert ch.execute("SELECT count(*) FROM spans").fetchone() == spans
        assert ch.execute(PASS_SQL).fetchall() == want
        ensure_views(ch)  # once upgraded, an open changes nothing
        assert ch.execute(PASS_SQL).fetchall() == want
