"""Every adapters test also checks that nothing it recorded was dropped or failed quietly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmtrace.tracer import health
from llmtrace.tracer.reading.memory import memory

_QUIET_FAILURES = ("wrong_value_type", "unknown_stage", "adapter_error")


@pytest.fixture(autouse=True)
def no_quiet_failures(request: pytest.FixtureRequest) -> Iterator[None]:
    before = health.counters()
    yield
    after = health.counters()
    expected = {"adapter_error"} if "never_reach_the_app" in request.node.name else set()
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in _QUIET_FAILURES if k not in expected}
    assert not any(grown.values()), f"recording dropped or failed quietly: {grown}"


@pytest.fixture(autouse=True)
def fresh_wire_memory() -> Iterator[None]:
    """The middleware remembers recent prompts per process; each test starts without another's."""
    memory.clear()
    yield
