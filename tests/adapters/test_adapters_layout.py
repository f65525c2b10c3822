"""The adapters' sub-packages (middleware, helpers) and tracer/reading keep every import users wrote working:
an old module path is the same module object as its new one, so its state and a test's patches are shared."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import pytest

from llmtrace.adapters.middleware.call_record import CallRecord, Options

OLD_TO_NEW = {
    "llmtrace.adapters.transport": "llmtrace.adapters.middleware.transport",
    "llmtrace.adapters.call": "llmtrace.adapters.middleware.call",
    "llmtrace.adapters.client_stages": "llmtrace.adapters.middleware.client_stages",
    "llmtrace.adapters.wire": "llmtrace.adapters.middleware.wire",
    "llmtrace.adapters.prices": "llmtrace.tracer.record.prices",
    "llmtrace.adapters.middleware.prices": "llmtrace.tracer.record.prices",
    "llmtrace.adapters.usage": "llmtrace.tracer.record.usage",
    "llmtrace.adapters.middleware.usage": "llmtrace.tracer.record.usage",
    "llmtrace.adapters.loops": "llmtrace.adapters.helpers.loops",
    "llmtrace.adapters.prompt_assembly": "llmtrace.adapters.helpers.prompt_assembly",
    "llmtrace.adapters.compaction": "llmtrace.adapters.helpers.compaction",
    "llmtrace.adapters.stop_reason": "llmtrace.adapters.helpers.stop_reason",
    "llmtrace.adapters.meters": "llmtrace.adapters.helpers.meters",
    "llmtrace.adapters.sessions": "llmtrace.tracer.reading.sessions",
    "llmtrace.adapters.divergence": "llmtrace.tracer.reading.divergence",
    "llmtrace.adapters.collect_conversations": "llmtrace.tracer.reading.conversations",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_module_path_is_the_new_module(old: str) -> None:
    new = importlib.import_module(OLD_TO_NEW[old])
    assert importlib.import_module(old) is new
    assert new.__spec__ is not None and new.__spec__.name == new.__name__ == OLD_TO_NEW[old]


def test_instrument_stays_the_function() -> None:
    # llmtrace.adapters.instrument is the function, not a module path (the module is middleware.instrument)
    import llmtrace.adapters as adapters
    from llmtrace.adapters.middleware import instrument as module

    assert adapters.instrument is module.instrument and callable(adapters.instrument)


def test_the_documented_imports_work_in_a_fresh_process() -> None:
    code = (
        "from llmtrace.adapters import instrument, session, loops\n"
        "from llmtrace.adapters.loops import ToolCall, dispatch, fan_out\n"
        "from llmtrace.adapters.compaction import compact\n"
        "from llmtrace.adapters.stop_reason import check_stop\n"
        "from llmtrace.adapters.prompt_assembly import SystemPromptAssembler\n"
        "from llmtrace.adapters.meters import load_prices, mark_deploy, pass_cost\n"
        "import llmtrace.adapters.helpers.loops as L\n"
        "assert loops is L and callable(instrument) and callable(session)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_stage_writers_read_a_frozen_record() -> None:
    fields = {f.name for f in dataclasses.fields(CallRecord)}
    assert {"obs", "pass_span", "opts", "times", "view", "end"} <= fields
    rec = CallRecord(**{f: None for f in fields})  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.end = 1  # type: ignore[misc]
    assert Options().hidden_stages  # the options instrument() takes live beside the record
