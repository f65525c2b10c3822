"""Every environment variable llmtrace reads is listed in ``tracer/settings.py`` and read through it.

A read of an ``LLMTRACE_*`` variable straight from ``os.environ`` elsewhere, or a name used in product code
that the catalogue does not list, fails here (issue 34: settings in one place)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmtrace.tracer import settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("llmtrace", "tracer", "adapters", "backend", "analyzers", "tui", "report")
# attribute or column names that merely start like a variable (not environment reads)
NOT_VARIABLES = {"LLMTRACE_STAGE", "LLMTRACE_PHASE"}
DIRECT_READ = re.compile(r"os\.(?:environ(?:\.get)?\s*[\[(]|getenv\s*\()\s*[\"'](LLMTRACE_[A-Z0-9_]+)")


def _sources() -> list[Path]:
    return [p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py") if "names_gen" not in p.name]


def _direct_reads(text: str) -> list[str]:
    """LLMTRACE_ names read from os.environ: spelled in the call, or through a module constant holding one."""
    constants = dict(re.findall(r"^([A-Z_]+)\s*(?::\s*\w+)?\s*=\s*[\"'](LLMTRACE_[A-Z0-9_]+)[\"']", text, re.M))
    found = [m.group(1) for m in DIRECT_READ.finditer(text)]
    for name, variable in constants.items():
        if re.search(rf"os\.(?:environ(?:\.get)?\s*[\[(]|getenv\s*\()\s*{name}\b", text):
            found.append(variable)
    return found


def test_no_llmtrace_variable_is_read_past_settings() -> None:
    direct = [(str(p.relative_to(ROOT)), name) for p in _sources() if p.name != "settings.py"
              for name in _direct_reads(p.read_text())]
    assert direct == [], f"read through llmtrace.tracer.settings.env instead: {direct}"


def test_every_variable_named_in_the_product_is_catalogued() -> None:
    named = {m for p in _sources() for m in re.findall(r"[\"'](LLMTRACE_[A-Z0-9_]+)[\"']", p.read_text())}
    assert named - NOT_VARIABLES - set(settings.ENVIRONMENT) == set()


def test_env_reads_values_and_refuses_unknown_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMTRACE_PRICES", "  prices.json ")
    assert settings.env("LLMTRACE_PRICES") == "prices.json"
    monkeypatch.setenv("LLMTRACE_PRICES", "  ")
    assert settings.env("LLMTRACE_PRICES") is None
    with pytest.raises(KeyError, match="LLMTRACE_NOT_A_SETTING"):
        settings.env("LLMTRACE_NOT_A_SETTING")
