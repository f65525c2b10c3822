"""The Safety & shaping phase: stages 39-41 of the registry (loaded in order by ``registry/stages.py``)."""

from __future__ import annotations

from llmtrace.tracer.registry.model import Stage, V

STAGES: tuple[Stage, ...] = (
    Stage(39, "safety.injection", "safety", "Injection scan",
          "Inspects untrusted text (tool output, retrieved pages) for hidden characters and instructions.",
          "A retrieved page gives the model orders it follows.",
          ("A",),
          (V("llmtrace.injection.spans_scanned", "int", "spans", "untrusted spans scanned"),
           V("llmtrace.injection.invisible_chars", "int", "chars", "invisible or bidi-control characters found"),
           V("llmtrace.injection.confusables", "int", "chars", "look-alike letters found"),
           V("llmtrace.injection.instruction_patterns", "int", "", "instruction-like phrases found"),
           V("llmtrace.injection.score", "float", "0..1", "overall risk score"),
           V("llmtrace.injection.action", "str", "", "allow, flag or block"))),
    Stage(40, "safety.moderation", "safety", "Streaming moderation",
          "Checks the output as it streams and can cut it off.",
          "The guard lags the generator, so text appears and is then retracted as a refusal.",
          ("A", "B"),
          (V("llmtrace.moderation.checks", "int", "", "moderation checks run"),
           V("llmtrace.moderation.lag_tokens", "int", "tokens", "tokens streamed before the verdict"),
           V("llmtrace.moderation.aborted", "bool", "", "true when the stream was cut"),
           V("llmtrace.moderation.retracted_chars", "int", "chars", "characters shown and then withdrawn"),
           V("llmtrace.moderation.shown_chars", "int", "chars", "characters shown to the user"))),
    Stage(41, "safety.stop_reason", "safety", "Stop-reason handling",
          "Reads why generation stopped and decides whether the output can be used.",
          "Nobody reads the stop reason, so truncated JSON reaches a parser.",
          ("A", "C"),
          (V("llmtrace.stop_reason.read", "bool", "", "true when the app looked at the finish reason"),
           V("llmtrace.stop_reason.truncated", "bool", "", "true when the output was cut by a cap"),
           V("llmtrace.stop_reason.parse_ok", "bool", "", "true when the output parsed as expected"),
           V("llmtrace.stop_reason.finish_reason", "str", "", "the finish reason the app was handed"),
           V("llmtrace.stop_reason.error", "str", "", "why the output failed to parse, when it did"))),
)
