"""Same prompt, different answer at temperature 0, for real: the bundled SmolLM2 in bfloat16, asked the
same thing twice. The second time the prompt comes from the prefix cache, so the arithmetic runs in other
shapes, and bfloat16 rounding is coarse enough to flip a greedy token. Skipped when the default model is
not installed (`llmtrace model pull`), or when this run's outputs happen to agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from analyzers_live import client, expect_first, store

pytestmark = pytest.mark.slow

STORY = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}]


def _three_greedy_answers(tmp_path: Path, *flags: str) -> Path:
    """The story asked three times at temperature 0 of the bundled model in bfloat16 (``flags`` added); skips
    when the model is not installed or the three answers agreed."""
    from llmtrace.backend.model.pull import default_model_path
    from llmtrace.demo_server import InProcessServer

    if not default_model_path().exists():
        pytest.skip("the default model is not installed")
    with InProcessServer(None, "--dtype", "bfloat16", *flags) as srv:
        c = client(srv)
        with store(tmp_path / "t.duckdb") as db:
            outs = {c.chat.completions.create(model=srv.model_id, messages=STORY, max_tokens=20,
                                              temperature=0).choices[0].message.content for _ in range(3)}
    if len(outs) == 1:
        pytest.skip("bfloat16 greedy outputs agreed this time")
    return db


def test_greedy_answers_drift_with_compute_shape_names_the_prefix_cache_path(tmp_path: Path) -> None:
    """Three requests one after another, each a batch of one: no batch was shared, so the mechanism is the
    prefix-cache path (a cold prefill, then cache hits), not 'different batches'."""
    found = expect_first(_three_greedy_answers(tmp_path), "different_answer", "cache.prefix_match")
    assert "prefix-cache path" in found[0].title, found[0].title
    cached = next(e for e in found[0].evidence if e.label == "cached prompt tokens seen").value
    assert len(cached) > 1  # the first pass computed the prompt, the later ones reused it
    assert next(e for e in found[0].evidence if e.label == "largest batch size").value == 1


def test_greedy_answers_drift_under_speculation_names_speculation(tmp_path: Path) -> None:
    """The same, with the server drafting tokens (`--speculative draft`): each check of a draft scores several
    tokens in one forward pass, another shape again, and the finding names speculation, the setting that can
    be turned off, rather than batching."""
    found = expect_first(_three_greedy_answers(tmp_path, "--speculative", "draft"), "different_answer",
                         "gen.speculation")
    drafted = next(e for e in found[0].evidence if e.label == "passes that drafted tokens")
    assert drafted.value == 3 and drafted.unit == "of 3"
