"""Sampling parameters of one request, validated before any work is done."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ConstraintKind = Literal["json_schema", "json_object", "regex", "grammar", "choice"]


class InvalidRequestError(ValueError):
    """A request the backend refuses before any work: the message names the field and the rule."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Constraint:
    """A structured-output constraint. ``after_marker``: free text until the marker, then constrained."""

    kind: ConstraintKind
    spec: object  # JSON schema dict, regex str, Lark grammar str, or list of choices
    after_marker: str | None = None
    tool_calls: bool = False  # the output is parsed into OpenAI tool_calls (finish_reason "tool_calls")


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    """Thinking inside delimiters, capped at ``budget`` tokens (the close delimiter is forced there)."""

    budget: int
    open_delimiter: str = "<think>"
    close_delimiter: str = "</think>"


@dataclass(frozen=True, slots=True)
class SpeculationConfig:
    method: Literal["none", "ngram", "self_draft"] = "none"
    k: int = 4  # tokens drafted per step
    ngram_max: int = 3  # n-gram prompt lookup: longest n-gram to match
    draft_layers: int = 8  # self-draft: the first N layers + LM head


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: int | None = None
    skip_special_tokens: bool = True
    detokenizer_holdback: bool | None = None  # None: the server's default (llmtrace serve --detokenizer-holdback)
    moderation: Any = None  # a moderation.ModerationPolicy: the streaming word-list check, None for none
    constraint: Constraint | None = None
    reasoning: ReasoningConfig | None = None
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str, str]] = [
            (self.temperature >= 0.0, "temperature", f"temperature must be >= 0, got {self.temperature}"),
            (0.0 < self.top_p <= 1.0, "top_p", f"top_p must be in (0, 1], got {self.top_p}"),
            (self.top_k >= 0, "top_k", f"top_k must be >= 0 (0 turns it off), got {self.top_k}"),
            (0.0 <= self.min_p <= 1.0, "min_p", f"min_p must be in [0, 1], got {self.min_p}"),
            (self.max_tokens >= 1, "max_tokens", f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.repetition_penalty > 0.0, "repetition_penalty",
             f"repetition_penalty must be > 0, got {self.repetition_penalty}"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty",
             f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}"),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty",
             f"presence_penalty must be in [-2, 2], got {self.presence_penalty}"),
        ]
        for ok, param, message in checks:
            if not ok:
                raise InvalidRequestError(message, param)
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidRequestError(f"logprobs must be in [0, 20], got {self.logprobs}", "logprobs")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
