"""Frequency and presence penalties on structured output, seen through foreign instrumentations and through
llmtrace's own middleware: OpenLLMetry and OpenInference record the penalties and the schema the request
asked for, and the collector turns them into ``gen.penalties`` as the middleware does, so ``diagnose`` names
``gen.penalties``; penalties sent as 0 (off, as many apps send them) are no finding, through either path,
and a pass is counted once though both the middleware and the server record the stage. Real OpenLLMetry and
OpenInference instrumentations of the openai SDK, LiteLLM's otel callback, the official SDK under ``instrument()``, real ``llmtrace
serve`` (tiny), real ``llmtrace collect``, ``diagnose --json`` as a subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from collector_helpers import ForeignApp, diagnose_foreign, diagnose_service
from testkit import RunningServer, start_server, stop_server

import llmtrace
from llmtrace.adapters import instrument

pytestmark = pytest.mark.slow


def _schema(i: int) -> dict[str, Any]:
    """Enum-only: the tiny model's answer ends inside max_tokens whatever it samples."""
    return {"type": "json_schema", "json_schema": {"name": "fare", "schema": {
        "type": "object", "properties": {"route": {"type": "string", "enum": [f"R{i}", f"R{i + 1}"]},
                                         "seats": {"type": "string", "enum": ["none", "few", "many"]}},
        "required": ["route", "seats"], "additionalProperties": False}}}


def _calls(freq: float, pres: float) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"Fare {i} as JSON."}], "max_tokens": 30, "stream": i % 2 == 1,
             "response_format": _schema(i), "frequency_penalty": freq, "presence_penalty": pres} for i in range(5)]


APPS = {"openllmetry_on": ("openllmetry", 1.0, 0.5), "openinference_on": ("openinference", 0.8, 0.0),
        "litellm_on": ("litellm", 0.7, 0.7), "openllmetry_zero": ("openllmetry", 0.0, 0.0),
        "openinference_zero": ("openinference", 0.0, 0.0), "litellm_zero": ("litellm", 0.0, 0.0)}


@pytest.fixture(scope="module")
def found(tiny_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    apps = {service: ForeignApp(app, _calls(freq, pres)) for service, (app, freq, pres) in APPS.items()}
    return diagnose_foreign(tmp_path_factory.mktemp("penalties-foreign"), tiny_server.base_url + "/v1", apps)


@pytest.mark.parametrize("service", ["openllmetry_on", "openinference_on", "litellm_on"])
def test_penalties_on_structured_output_are_named(found: dict[str, list[dict[str, Any]]], service: str) -> None:
    top = found[service][0]
    assert (top["stage"], top["severity"]) == ("gen.penalties", "warning"), found[service]
    # LiteLLM writes its raw request payload (where the penalties are) for the unstreamed calls only (0, 2, 4)
    assert top["title"].startswith("3 structured outputs" if service == "litellm_on" else "5 structured outputs")


@pytest.mark.parametrize("service", ["openllmetry_zero", "openinference_zero", "litellm_zero"])
def test_penalties_sent_as_zero_are_no_finding(found: dict[str, list[dict[str, Any]]], service: str) -> None:
    assert [f for f in found[service] if f["severity"] != "info"] == [], found[service]


@pytest.mark.parametrize(("freq", "pres", "named"), [(0.9, 0.6, True), (0.0, 0.0, False)])
def test_through_the_middleware(tmp_path: Path, freq: float, pres: float, named: bool) -> None:
    """The app traced into the server's own store (both sides of each pass record gen.penalties)."""
    server = start_server(tmp_path)
    llmtrace.init(db=server.db_path, service_name="fares", strict=True)
    try:
        client = instrument(openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0))
        for i in range(4):
            stream = client.chat.completions.create(
                model="tiny", max_tokens=30, temperature=0, stream=True, response_format=_schema(i),
                messages=[{"role": "user", "content": f"Fare {i} as JSON."}], frequency_penalty=freq,
                presence_penalty=pres)
            for _ in stream:
                pass
    finally:
        llmtrace.shutdown()
        stop_server(server)  # the server writes its side of each pass before it exits
    findings = diagnose_service(server.db_path, "fares")
    if named:
        assert findings[0]["stage"] == "gen.penalties" and findings[0]["title"].startswith("4 structured"), findings
    else:
        assert [f for f in findings if f["severity"] != "info"] == [], findings
