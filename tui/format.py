"""Short human formats for table cells: durations, counts, ratios, money, UTC times."""

from __future__ import annotations

import datetime as _dt

from llmtrace.tracer.cli.console import printable

NONE = "—"


def ms(value: float | None) -> str:
    if value is None:
        return NONE
    if value >= 10_000:
        return f"{value / 1000:.0f}s"
    if value >= 1000:
        return f"{value / 1000:.2f}s"
    if value >= 100:
        return f"{value:.0f}ms"
    if value >= 10:
        return f"{value:.1f}ms"
    return f"{value:.2f}ms"


def count(value: int | float | None) -> str:
    if value is None:
        return NONE
    v = float(value)
    if abs(v) >= 1_000_000:
        return f"{v / 1_000_000:.1f}M"
    if abs(v) >= 100_000:
        return f"{v / 1000:.0f}k"
    return f"{int(round(v)):,}" if abs(v) >= 10_000 else f"{int(round(v))}"


def pct(value: float | None) -> str:
    return NONE if value is None else f"{value * 100:.0f}%"


def usd(value: float | None) -> str:
    if value is None:
        return NONE
    if value == 0:
        return "$0"
    if abs(value) < 0.0001:  # small models and short prompts cost fractions of a cent: keep the digits
        return f"${value:.8f}".rstrip("0")
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def utc_time(ns: int | None, with_date: bool = False) -> str:
    if ns is None:
        return NONE
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")


def value(v: object) -> str:
    """A boundary value as text: lists joined, floats trimmed, long strings cut."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        inner = ", ".join(value(x) for x in v[:8])
        return f"[{inner}{', …' if len(v) > 8 else ''}]"
    text = str(v)
    return text if len(text) <= 80 else text[:77] + "…"


def printable_lines(text: str) -> str:
    """Like ``printable``, but keeps the line breaks of text written to be read on several lines."""
    return "\n".join(printable(line) for line in text.split("\n"))
