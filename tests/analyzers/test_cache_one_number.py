"""One number per claim, and it is the engine's: a timestamp near the top of the system prompt (the quickstart's
shape), sent through the real OpenAI SDK wrapped by ``instrument()`` to the real backend. The cache finding's
first missed token is the cached token count the engine reported, its headline share is the share its evidence
states (prompt tokens re-prefilled over all the passes' prompt tokens), the segment is said as "system prompt",
and the terminal's loss line does not put the share of passes beside the losses as if it were one."""

from __future__ import annotations

import datetime as dt
import re
import statistics
from pathlib import Path

import pytest
from analyzers_live import client, expect_first, server, store

from llmtrace.adapters.helpers.prompt_assembly import SystemPromptAssembler
from llmtrace.analyzers.core.render import plain
from llmtrace.tracer.storage.store import read_connection

pytestmark = pytest.mark.slow

POLICY = "Policy: refunds are accepted within 30 days of delivery with the receipt. " * 6


@pytest.mark.parametrize("capture", ["hashes", "full"])
def test_cache_finding_says_one_quantity_and_the_engines_token(tmp_path: Path, capture: str) -> None:
    srv = server()
    c = client(srv)
    # the server is shared by the module's tests: a prompt of its own per run, or the cache already holds it
    head = f"Desk {capture}. Current time: "  # the tag first: nothing the other run sent is a prefix of these
    asm = SystemPromptAssembler(head + "{now}. You are Acme's support agent. " + POLICY)
    with store(tmp_path / "t.duckdb", capture=capture) as db:
        for i in range(6):
            now = (dt.datetime(2026, 3, 1, 9, 0, 0) + dt.timedelta(seconds=7 * i)).isoformat()
            c.chat.completions.create(model=srv.model_id, max_tokens=4, temperature=0, messages=[
                {"role": "system", "content": asm.assemble(now=now).text},
                {"role": "user", "content": "Where is my order 48213?"}])
    f = expect_first(db, "slow_first_token", "cache.prefix_match")[0]
    assert f"timestamp at char {len(head)} of the system prompt" in f.title, f.title
    with read_connection(db) as conn:
        cached = [int(r[0]) for r in conn.execute("SELECT coalesce(cached_tokens, 0) FROM passes ORDER BY start_ns")
                  .fetchall()]
    affected = sorted(cached[1:])  # every pass after the first lost the prefix behind the timestamp
    m = re.search(r"the cache stops at token (\d+) → (\d+)% of prompt tokens re-prefilled", f.title)
    assert m, f.title
    assert int(m.group(1)) == int(statistics.median(affected)), (f.title, cached)  # the engine's own count
    first_miss = next(e for e in f.evidence if e.label == "first prompt token the cache missed")
    assert first_miss.value == int(m.group(1))
    share = next(e for e in f.evidence if e.label == "share of prompt tokens re-prefilled")
    assert abs(100 * float(share.value) - int(m.group(2))) <= 0.51, (f.title, share)  # one quantity, rounded twice
    assert not any(e.label == "share of all prompt tokens" for e in f.evidence)
    text = plain([f])
    assert "lost:" in text and not re.search(r"lost:[^\n]*, \d+% of passes", text), text
    assert re.search(r"on \d+% of passes", text), text
