"""Shared by the analyzer tests: the real backend served in-process (tiny model), a fresh store per test
that both the app's and the server's spans go into, and the real OpenAI SDK instrumented by the adapters.

Servers are started once per test session (they take a few seconds each) and stopped at exit; each test
gets its own store, so its causes (and their absence) are its own.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llmtrace
from llmtrace.analyzers import ANALYZERS, Finding, run_analyzers
from llmtrace.tracer.storage.store import read_connection

_servers: dict[str, Any] = {}

TEMPLATE = """{%- for m in messages -%}### {{ m['role'] }}
{{ m['content'] }}
{% endfor -%}{%- if add_generation_prompt -%}### assistant
{% endif -%}"""


def server(kind: str = "default", tmp: Path | None = None) -> Any:
    """``default``: the tiny model as `llmtrace serve --model tiny` runs it. ``odd``: one running slot and
    a one-deep queue, a small KV pool, and a chat template that is not the model's own."""
    if kind in _servers:
        return _servers[kind]
    from llmtrace.demo_server import InProcessServer

    extra: list[str] = []
    if kind == "odd":
        path = Path(tmp or Path("/tmp")) / "foreign_template.jinja"
        path.write_text(TEMPLATE)
        extra = ["--max-running", "1", "--max-queued", "2", "--num-blocks", "48", "--chat-template", str(path)]
    srv = InProcessServer("tiny", *extra).start()
    _servers[kind] = srv
    atexit.register(srv.stop)
    return srv


@contextlib.contextmanager
def store(path: Path, deploy: str | None = None, capture: str = "full") -> Iterator[Path]:
    """Trace into ``path`` for the block; everything is flushed when it ends."""
    llmtrace.init(db=path, service_name="analyzer-test", deploy=deploy, capture=capture, strict=True)
    try:
        yield path
    finally:
        llmtrace.shutdown()


def client(srv: Any) -> Any:
    import openai

    from llmtrace.adapters import instrument

    return instrument(openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0))


def findings(path: Path, symptom: str) -> list[Finding]:
    with read_connection(path) as conn:
        return ANALYZERS[symptom].analyze(conn)


def all_findings(path: Path) -> list[Finding]:
    with read_connection(path) as conn:
        return run_analyzers(conn)


def stages(found: list[Finding]) -> list[str]:
    return [f.stage for f in found]


def expect_first(path: Path, symptom: str, stage: str) -> list[Finding]:
    """The symptom's findings, asserting there is one and the best names ``stage``."""
    found = findings(path, symptom)
    assert found and found[0].stage == stage, f"{symptom}: expected {stage} first, got {stages(found)}"
    return found


@contextlib.contextmanager
def own_prices(tmp_path: Path, monkeypatch: Any, version: str, cached_input: float) -> Iterator[None]:
    """A price file of the app's own for the tiny model (as a user with a negotiated rate has), loaded for the
    block, and the bundled prices again after it."""
    from llmtrace.adapters.helpers import meters

    own = tmp_path / "prices.json"
    own.write_text(f'{{"_version": "{version}", "tiny": {{"input": 1.0, "cached_input": {cached_input}, "output": 4.0}}}}')
    monkeypatch.setenv("LLMTRACE_PRICES", str(own))
    meters.load_prices()
    try:
        yield
    finally:
        monkeypatch.delenv("LLMTRACE_PRICES")
        meters.load_prices()
