"""Colours the explorer gives phases and severities. Phase ids come from the registry; colours are ours."""

from __future__ import annotations

from llmtrace.tracer.registry.stages import PHASES

PHASE_COLOURS: dict[str, str] = {
    "arrival": "#5fafff",
    "intake": "#87d787",
    "cache": "#ffd75f",
    "forward": "#ff8787",
    "generation": "#d787ff",
    "loops": "#5fd7d7",
    "safety": "#ffaf5f",
    "meters": "#b2b2b2",
}
PASS_COLOUR = "#e4e4e4"
OTHER_COLOUR = "#808080"
SEVERITY_STYLES: dict[str, str] = {
    "critical": "bold #ff5f5f",
    "high": "bold #ff5f5f",
    "error": "bold #ff5f5f",
    "warning": "#ffaf5f",
    "medium": "#ffaf5f",
    "info": "#5fafff",
    "low": "#5fafff",
}

# Every registry phase must have a colour; a new phase without one is a bug we want to see in tests.
MISSING_PHASE_COLOURS = [p.id for p in PHASES if p.id not in PHASE_COLOURS]


def phase_colour(phase: str | None) -> str:
    return PHASE_COLOURS.get(phase or "", OTHER_COLOUR)


def severity_style(severity: str | None) -> str:
    return SEVERITY_STYLES.get((severity or "").lower(), "")
