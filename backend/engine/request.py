"""What goes into the engine (a request) and what comes out of each step (a request's new output)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmtrace.backend.generation.params import InvalidRequestError, SamplingParams

if TYPE_CHECKING:
    from llmtrace.backend.generation.pipeline import TokenLogprob
    from llmtrace.tracer.record.recording import PassSpan


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One generation request. With ``pass_span`` the engine records its stage spans under that pass and
    sets the pass's summary values (the caller still ends the pass)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0  # higher runs first and is preempted last
    pass_span: PassSpan | None = None
    arrival_ns: int | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise InvalidRequestError("request_id must be a non-empty string", "request_id")
        if not self.prompt_token_ids:
            raise InvalidRequestError("the prompt must hold at least one token", "prompt")


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """New tokens and text of one request after one step (``finished`` on its last)."""

    request_id: str
    new_token_ids: list[int]
    text_delta: str
    finished: bool
    finish_reason: str | None  # stop, length, tool_calls, content_filter, abort
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    tool_calls: list[dict[str, Any]] | None = None
    logprobs: list[TokenLogprob] | None = None  # one per new token, when the request asked for logprobs
    stop_sequence: str | None = None  # on the last output: the stop string that ended generation, if one did
