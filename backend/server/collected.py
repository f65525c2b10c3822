"""What a request's engine outputs add up to (text, token clock, log-probabilities, the finished output),
and the generator that feeds them and aborts the engine request when it is left unfinished."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from llmtrace.backend.engine.request import EngineRequest, RequestOutput
from llmtrace.backend.server import openai_protocol as oai
from llmtrace.backend.server.job import Outcome
from llmtrace.backend.server.replica_set import Selection
from llmtrace.tracer import recording as rec
from llmtrace.tracer.record import run_queue


class TokenClock:
    """When the first and the last output token left the engine (server-side TTFT and TPOT)."""

    __slots__ = ("first_ns", "last_ns", "threads", "first_waited")

    def __init__(self) -> None:
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.threads: tuple[int, ...] = ()  # the threads whose wait for a CPU the first token is read with
        self.first_waited: int | None = None  # their run-queue wait then (run_queue.threads_wait)

    def tick(self, out: RequestOutput) -> None:
        if out.new_token_ids:
            now = rec.now_ns()
            if self.first_ns is None:
                self.first_ns = now
                self.first_waited = run_queue.threads_wait(self.threads) if self.threads else None
            self.last_ns = now


class Collected:
    """What a request's engine outputs add up to, for either response shape: the text, the token clock, the
    log-probabilities (OpenAI items; only when asked for) and the finished output."""

    __slots__ = ("texts", "clock", "token_bytes", "logprobs", "unsent", "final")

    def __init__(self, texts: list[str], logprobs_tokenizer: Any | None) -> None:
        self.texts = texts
        self.clock = TokenClock()
        self.token_bytes = logprobs_tokenizer.token_bytes if logprobs_tokenizer is not None else None
        self.logprobs: list[dict[str, Any]] = []
        self.unsent: list[dict[str, Any]] = []
        self.final: RequestOutput | None = None

    def add(self, out: RequestOutput) -> None:
        self.clock.tick(out)
        self.texts.append(out.text_delta)
        if self.token_bytes is not None and out.logprobs:
            items = oai.logprob_items(out.logprobs, self.token_bytes)
            self.logprobs += items
            self.unsent += items
        if out.finished:
            self.final = out

    def unsent_logprobs(self) -> list[dict[str, Any]] | None:
        items, self.unsent = self.unsent, []
        return items or None

    def outcome(self, user_stops: tuple[str, ...] = ()) -> Outcome:
        """``user_stops``: the request's own stop strings. The engine names whatever ended generation (the
        end-of-turn token, a finished grammar); only a stop string the user asked for is a stop sequence."""
        final = self.final
        if final is None:
            raise RuntimeError("the engine ended the request without a finished output")
        reason = final.finish_reason or "stop"
        if reason == "abort":
            reason = "stop"
        calls = final.tool_calls or None
        if calls:
            reason = "tool_calls"
        return Outcome(text="".join(self.texts), finish_reason=reason, prompt_tokens=final.num_prompt_tokens,
                       cached_tokens=final.num_cached_tokens, output_tokens=final.num_output_tokens,
                       tool_calls=calls, logprobs=self.logprobs if self.token_bytes is not None else None,
                       stop_sequence=final.stop_sequence if not calls and final.stop_sequence in user_stops
                       else None)


async def generate(sel: Selection, req: EngineRequest, got: Collected) -> AsyncGenerator[RequestOutput, None]:
    """The request's outputs, each added to ``got`` first; a request left unfinished (the client went away,
    the response failed) is aborted so its KV blocks return to the pool."""
    try:
        async with aclosing(sel.replica.generate(req)) as outputs:
            async for out in outputs:
                got.add(out)
                yield out
                if out.finished:
                    return
    finally:
        if got.final is None:
            sel.replica.abort(req.request_id)
