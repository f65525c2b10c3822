"""Stop-reason handling: before using an answer, look at why generation stopped and whether it parses.

``check_stop`` takes the output and finish reason (or an SDK response to read them from) and records
``safety.stop_reason``: whether the app read the reason, whether the output was cut by a cap, and
whether it parses as the JSON the app expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

TRUNCATING = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class StopCheck:
    finish_reason: str | None
    read: bool
    truncated: bool
    parse_ok: bool | None  # None: no format was expected
    value: Any = None
    error: str | None = None

    @property
    def usable(self) -> bool:
        return not self.truncated and self.parse_ok is not False


def _g(obj: object, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def from_response(response: object) -> tuple[str, str | None]:
    """(output text, finish reason) of an OpenAI chat completion or an Anthropic message."""
    choices = _g(response, "choices")
    if choices:
        c0 = choices[0]
        msg = _g(c0, "message")
        text = _g(msg, "content") if msg is not None else _g(c0, "text")
        if not text and msg is not None and _g(msg, "tool_calls"):
            text = _g(_g(_g(msg, "tool_calls")[0], "function"), "arguments")
        return (text or ""), _g(c0, "finish_reason")
    blocks = _g(response, "content")
    if isinstance(blocks, list):
        parts = [str(_g(b, "text")) for b in blocks if _g(b, "type") == "text"]
        return "".join(parts), _g(response, "stop_reason")
    raise ValueError(f"cannot read output and stop reason from {type(response).__name__}")


def check_stop(
    output: str | None = None,
    finish_reason: str | None = None,
    *,
    response: object = None,
    expect_json: bool = False,
    required_keys: Sequence[str] = (),
    parent: rec.PassSpan | None = None,
) -> StopCheck:
    """Check an answer before use. Passing ``finish_reason`` (or ``response``) counts as reading it."""
    if response is not None:
        output, finish_reason = from_response(response)
    if output is None:
        raise ValueError("check_stop needs the output text or the response")
    read = finish_reason is not None
    truncated = finish_reason in TRUNCATING
    parse_ok: bool | None = None
    value: Any = None
    error: str | None = None
    if expect_json or required_keys:
        m = _FENCE.match(output)
        try:
            value = json.loads(m.group(1) if m else output)
            missing = [k for k in required_keys if not (isinstance(value, Mapping) and k in value)]
            parse_ok = not missing
            if missing:
                error = f"missing keys: {', '.join(missing)}"
        except ValueError as exc:
            parse_ok, error = False, f"not JSON: {exc}"
    result = StopCheck(finish_reason, read, truncated, parse_ok, value, error)
    with rec.stage(
        S.SAFETY_STOP_REASON,
        {
            N.STOP_REASON_READ: read,
            N.STOP_REASON_TRUNCATED: truncated,
            N.STOP_REASON_PARSE_OK: parse_ok,
            N.STOP_REASON_FINISH_REASON: finish_reason,
            N.STOP_REASON_ERROR: error,
        },
        parent=parent,
    ):
        pass
    return result
