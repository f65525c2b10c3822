"""EngineConfig(stage_timing=False): the forward clock reads no clock, the answer is unchanged (issue 18)."""

from __future__ import annotations

import random

import pytest
from engine_helpers import greedy, random_prompt, run_all, tokens_of

from llmtrace.backend.engine import EngineConfig, EngineRequest
from llmtrace.backend.model import forward_clock


def test_stage_timing_is_on_by_default() -> None:
    assert EngineConfig().stage_timing is True


def test_untimed_engine_reads_no_clock_and_answers_the_same(make_engine, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    prompt = random_prompt(random.Random(5), 30)
    timed = make_engine(num_blocks=32)
    want = tokens_of(run_all(timed, [EngineRequest("t", prompt, greedy(6))])["t"])
    assert set(timed.last_step.sections_ms) >= {"embedding", "attention", "feed_forward", "lm_head"}

    def no_clock() -> int:
        raise AssertionError("the forward clock read the time with stage_timing=False")

    monkeypatch.setattr(forward_clock, "_now", no_clock)
    untimed = make_engine(num_blocks=32, stage_timing=False)
    got = tokens_of(run_all(untimed, [EngineRequest("u", prompt, greedy(6))])["u"])
    assert got == want
    assert untimed.last_step.sections_ms == {}
