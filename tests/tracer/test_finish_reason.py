"""tracer.finish_reason: every spelling onto the six canonical reasons."""

from __future__ import annotations

import enum

import pytest

from llmtrace.tracer.registry.finish_reason import (
    CANONICAL,
    is_truncated,
    normalize_finish_reason,
    normalize_finish_reasons,
)


@pytest.mark.parametrize(("raw", "want"), [
    # OpenAI chat completions / OTel GenAI
    ("stop", "stop"), ("length", "length"), ("tool_calls", "tool_calls"), ("function_call", "tool_calls"),
    ("content_filter", "content_filter"), ("tool_call", "tool_calls"), ("error", "error"),
    # Anthropic
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
    ("refusal", "content_filter"), ("pause_turn", "other"), ("model_context_window_exceeded", "length"),
    # Responses API
    ("max_output_tokens", "length"), ("completed", "stop"), ("failed", "error"),
    # Gemini (enum names, proto names, enum reprs)
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
    ("FINISH_REASON_STOP", "stop"), ("FinishReason.MAX_TOKENS", "length"), ("MALFORMED_FUNCTION_CALL", "error"),
    ("FINISH_REASON_UNSPECIFIED", "other"), ("OTHER", "other"),
    # Bedrock / Cohere / Mistral
    ("guardrail_intervened", "content_filter"), ("COMPLETE", "stop"), ("ERROR_TOXIC", "content_filter"),
    ("model_length", "length"),
    # case, whitespace and list-like strings (LiteLLM, OpenInference)
    ("  Length ", "length"), ("End-Turn", "stop"), ('["length"]', "length"), ("['tool_calls']", "tool_calls"),
    ('[""]', None), ("[]", None),
    # lists (gen_ai.response.finish_reasons) take the first reason
    (["length", "stop"], "length"), (("", "max_tokens"), "length"), ([], None),
    # nothing, and words nobody knows
    (None, None), ("", None), ("   ", None), ("sleepy", "other"), (42, "other"), (b"end_turn", "stop"),
])
def test_spellings(raw: object, want: str | None) -> None:
    assert normalize_finish_reason(raw) == want


def test_every_answer_is_canonical() -> None:
    for raw in ("stop", "MAX_TOKENS", "refusal", "whatever", '["x"]', "[broken", 3.5, object()):
        got = normalize_finish_reason(raw)
        assert got in CANONICAL, (raw, got)


def test_responses_incomplete_needs_its_detail() -> None:
    assert normalize_finish_reason("incomplete", "max_output_tokens") == "length"
    assert normalize_finish_reason("incomplete", "content_filter") == "content_filter"
    assert normalize_finish_reason("incomplete", "max_messages") == "other"
    assert normalize_finish_reason("incomplete") == "other"
    # the detail only qualifies a status that needs one
    assert normalize_finish_reason("stop", "max_output_tokens") == "stop"


def test_enum_members() -> None:
    class FinishReason(enum.Enum):
        STOP = 1
        MAX_TOKENS = 2

    class StrReason(str, enum.Enum):
        SAFETY = "SAFETY"

    assert normalize_finish_reason(FinishReason.MAX_TOKENS) == "length"
    assert normalize_finish_reason(FinishReason.STOP) == "stop"
    assert normalize_finish_reason(StrReason.SAFETY) == "content_filter"


def test_lists_and_truncation() -> None:
    assert normalize_finish_reasons('["length", "end_turn"]') == ["length", "stop"]
    assert normalize_finish_reasons(["MAX_TOKENS", None, "", "tool_use"]) == ["length", "tool_calls"]
    assert normalize_finish_reasons("max_tokens") == ["length"]
    assert normalize_finish_reasons(None) == []
    assert is_truncated("max_tokens") and is_truncated('["length"]') and is_truncated("incomplete", "max_output_tokens")
    assert not is_truncated("end_turn") and not is_truncated(None)
