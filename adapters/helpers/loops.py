"""Loops and tools: running the tool calls a model asks for, one at a time or fanned out.

``Tools`` holds the app's tool functions with their scope (read / write / external); ``dispatch`` runs
one call as an ``execute_tool {name}`` span with ``loop.tool_dispatch`` values (errors recorded, then
raised); ``fan_out`` / ``afan_out`` run a turn's calls in parallel or in sequence and record
``loop.fan_out``; ``agent`` opens the span a whole turn hangs under. Tool calls are accepted as the
OpenAI SDK gives them (``.function.name`` / ``.function.arguments`` JSON), as Anthropic ``tool_use``
blocks (``.name`` / ``.input``), or as dicts.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import tool_digest
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

SCOPES = ("read", "write", "external")


@contextmanager
def agent(name: str, *, conversation_id: str | None = None) -> Iterator[rec.PassSpan]:
    """An ``invoke_agent {name}`` span around one user turn: the client passes, tool calls and helper
    stages made inside it share its trace, so one waterfall shows the whole turn."""
    attrs = {N.GEN_AI_AGENT_NAME: name, N.GEN_AI_CONVERSATION_ID: conversation_id}
    with rec.start_pass(name, operation="invoke_agent", side="app", attributes=attrs) as span:
        yield span


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]
    id: str | None = None

    @property
    def signature(self) -> str:
        """Name plus canonical arguments: two calls with equal signatures did the same thing."""
        return f"{self.name}:{json.dumps(self.arguments, sort_keys=True, default=str)}"


def _get(obj: object, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def as_tool_call(call: object) -> ToolCall:
    """Normalise an OpenAI tool call, an Anthropic tool_use block, a dict, or a ToolCall."""
    if isinstance(call, ToolCall):
        return call
    fn = _get(call, "function")
    if fn is not None:  # OpenAI: {"id", "function": {"name", "arguments": "<json>"}}
        name, raw = _get(fn, "name"), _get(fn, "arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
        except ValueError as exc:
            raise ValueError(f"tool call {name!r} has arguments that are not JSON: {raw[:80]!r}") from exc
    else:  # Anthropic tool_use {"id", "name", "input"} or a plain {"name", "arguments"}
        name = _get(call, "name")
        args = _get(call, "input")
        if args is None:
            args = _get(call, "arguments") or {}
    if not isinstance(name, str) or not name:
        raise ValueError(f"not a tool call: {call!r}")
    if not isinstance(args, Mapping):
        raise ValueError(f"tool call {name!r} arguments must be an object, got {type(args).__name__}")
    cid = _get(call, "id")
    return ToolCall(name, dict(args), str(cid) if cid is not None else None)


def approx_tokens(value: object) -> int:
    """A rough token count (about four characters per token) for sizing results, not billing."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return (len(text) + 3) // 4


class Tools:
    """The app's tools by name, each with a scope; ``dispatch`` runs one call and records it."""

    def __init__(self, budget: Any | None = None) -> None:
        self._tools: dict[str, tuple[Callable[..., Any], str]] = {}
        self.budget = budget  # a loops budget: repeated identical calls are checked before running

    def register(
        self, fn: Callable[..., Any] | None = None, *, name: str | None = None, scope: str = "read"
    ) -> Any:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")

        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            self._tools[name or f.__name__] = (f, scope)
            return f

        return add(fn) if fn is not None else add

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def scope(self, name: str) -> str:
        return self._tools[name][1]

    def _lookup(self, call: object) -> tuple[ToolCall, Callable[..., Any], str]:
        tc = as_tool_call(call)
        if tc.name not in self._tools:
            raise ValueError(f"unknown tool {tc.name!r}; registered: {sorted(self._tools)}")
        fn, scope = self._tools[tc.name]
        return tc, fn, scope

    def dispatch(self, call: object, *, parent: rec.PassSpan | None = None) -> Any:
        tc, fn, scope = self._lookup(call)
        return dispatch(tc, fn, scope=scope, parent=parent, budget=self.budget)

    async def adispatch(self, call: object, *, parent: rec.PassSpan | None = None) -> Any:
        tc, fn, scope = self._lookup(call)
        return await adispatch(tc, fn, scope=scope, parent=parent, budget=self.budget)


def _checked(call: object, budget: Any | None) -> ToolCall:
    """The normalised call, once the budget (if any) has let it run: a repeat is stopped before it runs."""
    tc = as_tool_call(call)
    if budget is not None:
        budget.check_tool(tc.name, tc.arguments)
    return tc


def dispatch(
    call: object,
    fn: Callable[..., Any],
    *,
    scope: str = "read",
    parent: rec.PassSpan | None = None,
    budget: Any | None = None,
) -> Any:
    """Run ``fn(**arguments)`` as one tool call span; the tool's exception is recorded, then raised."""
    tc = _checked(call, budget)
    with rec.tool_span(tc.name, tc.id, scope=scope, parent=parent, values=_call_values(tc)) as span:
        try:
            result = fn(**tc.arguments)
        except Exception as exc:
            _record_error(span, tc, exc)
            raise
        _record_result(span, tc, result)
    return result


async def adispatch(
    call: object,
    fn: Callable[..., Any],
    *,
    scope: str = "read",
    parent: rec.PassSpan | None = None,
    budget: Any | None = None,
) -> Any:
    """The asyncio form of ``dispatch``: ``fn`` may be a coroutine function or a plain one."""
    tc = _checked(call, budget)
    with rec.tool_span(tc.name, tc.id, scope=scope, parent=parent, values=_call_values(tc)) as span:
        try:
            result = fn(**tc.arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            _record_error(span, tc, exc)
            raise
        _record_result(span, tc, result)
    return result


def _call_values(tc: ToolCall) -> dict[str, object]:
    """The call's argument digest (no text): the same call again shows as a loop, a call over other
    arguments (fan-out) does not."""
    return {N.TOOL_ARGUMENTS_HASH: _quiet(tool_digest.arguments_digest, tc.arguments)}


def _record_result(span: rec.StageSpan, tc: ToolCall, result: object) -> None:
    """The result's size, digest and kind: the same result again (or an error returned as a result, an empty
    one) after the model saw it is a call that made no progress."""
    span.set(N.TOOL_RESULT_TOKENS, approx_tokens(result))
    span.set(N.TOOL_RESULT_HASH, _quiet(tool_digest.result_digest, result, None, tc.arguments))
    span.set(N.TOOL_RESULT_KIND, _quiet(tool_digest.result_kind, result))


def _record_error(span: rec.StageSpan, tc: ToolCall, exc: BaseException) -> None:
    """The error's digest as the call's result, read without the call's own arguments and numbers: the same
    error over and over ("order KO-1 not found", "order KO-2 not found") is a loop that makes no progress."""
    error = f"{type(exc).__name__}: {exc}"
    span.set(N.TOOL_RESULT_HASH, _quiet(tool_digest.result_digest, None, error, tc.arguments))
    span.set(N.TOOL_RESULT_KIND, "error")


def _quiet(fn: Callable[..., str | None], *args: object) -> str | None:
    """A digest, or None when the value cannot be read: recording never breaks the app's tool call."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001
        return None


def _fan_out_values(n: int, mode: str, passes: int | None, reprefill_tokens: int | None) -> dict[str, object]:
    """The ``loop.fan_out`` values; a bad ``mode`` raises here, before the stage opens."""
    if mode not in ("parallel", "sequential"):
        raise ValueError(f"mode must be parallel or sequential, got {mode!r}")
    return {
        N.FANOUT_CALLS: n,
        N.FANOUT_MODE: mode,
        # Parallel calls go back to the model together (one more pass); sequential ones one by one.
        N.FANOUT_PASSES: passes if passes is not None else (1 if mode == "parallel" else n),
        N.FANOUT_REPREFILL_TOKENS: reprefill_tokens,
    }


def fan_out(
    calls: Sequence[object],
    run: Callable[[Any], Any],
    *,
    mode: str = "parallel",
    max_workers: int = 8,
    passes: int | None = None,
    reprefill_tokens: int | None = None,
    parent: rec.PassSpan | None = None,
) -> list[Any]:
    """Run ``run(call)`` for each call; results in call order, a failed call's exception in its place."""
    with rec.stage(
        S.LOOP_FAN_OUT, _fan_out_values(len(calls), mode, passes, reprefill_tokens), parent=parent
    ) as s:
        results: list[Any] = []
        if mode == "sequential" or len(calls) <= 1:
            for c in calls:
                try:
                    results.append(run(c))
                except Exception as exc:
                    results.append(exc)
        else:
            # Each worker runs in a copy of the caller's context: its tool span gets the caller's parent.
            ctx = contextvars.copy_context()
            with ThreadPoolExecutor(max_workers=min(max_workers, len(calls))) as pool:
                futures = [pool.submit(ctx.copy().run, run, c) for c in calls]
                for f in futures:
                    try:
                        results.append(f.result())
                    except Exception as exc:
                        results.append(exc)
        s.set(N.FANOUT_ERRORS, sum(1 for r in results if isinstance(r, Exception)))
    return results


async def afan_out(
    calls: Sequence[object],
    run: Callable[[Any], Awaitable[Any]],
    *,
    mode: str = "parallel",
    passes: int | None = None,
    reprefill_tokens: int | None = None,
    parent: rec.PassSpan | None = None,
) -> list[Any]:
    """The asyncio form of ``fan_out``: parallel runs the coroutines together with ``gather``."""
    with rec.stage(
        S.LOOP_FAN_OUT, _fan_out_values(len(calls), mode, passes, reprefill_tokens), parent=parent
    ) as s:
        if mode == "parallel":
            results = list(await asyncio.gather(*(run(c) for c in calls), return_exceptions=True))
        else:
            results = []
            for c in calls:
                try:
                    results.append(await run(c))
                except Exception as exc:
                    results.append(exc)
        s.set(N.FANOUT_ERRORS, sum(1 for r in results if isinstance(r, BaseException)))
    return results
