"""The generation pipeline: from one step's logits to chosen tokens, and from tokens to streamed text.

The engine calls, per step: ``sample(logits, states)`` for the running sequences, then ``accept(state,
token, now_ns)`` for each chosen token (which returns the text delta and whether the sequence finished), and
at the end ``stage_values(state)`` for the boundary values of the Generation stages it emits.

Order inside ``sample`` for one row: penalties -> constraint mask -> reasoning-budget forcing ->
temperature / top-k / top-p / min-p with the sequence's own seeded generator (argmax at temperature 0).
Every row is processed on its own, so one sequence's choice never depends on the others in the batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from llmtrace.backend.generation.constraint import ConstraintMatcher, make_ll_tokenizer
from llmtrace.backend.generation.detokenizer import IncrementalDetokenizer
from llmtrace.backend.generation.moderation import StreamingModeration
from llmtrace.backend.generation.params import Constraint, SamplingParams
from llmtrace.backend.generation.penalties import PenaltyState
from llmtrace.backend.generation.reasoning import ReasoningTracker
from llmtrace.backend.generation.sampler import EffectiveSampling, position_uniform, sample_row
from llmtrace.backend.generation.stop_strings import StopStringMatcher
from llmtrace.backend.generation.streaming import StreamClock
from llmtrace.backend.generation.tool_calls import parse_tool_calls
from llmtrace.tracer.reading import stop_context
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


@dataclass(frozen=True, slots=True)
class TokenResult:
    text_delta: str
    finished: bool
    finish_reason: str | None = None  # a FinishReason from accept(); finish() passes on what it was given


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """Log-probability of a chosen token under the model's raw scores, with the ``n`` most likely tokens."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def _moderation_values(st: SequenceState) -> dict[str, dict[str, object]]:
    return {S.SAFETY_MODERATION: st.moderator.values()} if st.moderator is not None else {}


@dataclass(slots=True)
class SequenceState:
    """Everything the pipeline keeps for one sequence between steps."""

    params: SamplingParams
    effective: EffectiveSampling
    prompt_token_ids: list[int]
    penalties: PenaltyState
    detokenizer: IncrementalDetokenizer
    stops: StopStringMatcher
    clock: StreamClock
    constraint: ConstraintMatcher | None = None
    reasoning: ReasoningTracker | None = None
    moderator: StreamingModeration | None = None  # llmtrace serve --moderation-words / the request's field
    output_token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finished: bool = False
    finish_reason: str | None = None  # a FinishReason, or what finish() was given (e.g. "abort")
    stop_matched: str | None = None
    content_ns: int | None = None  # when the first chunk outside thinking was produced
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per output token when params.logprobs
    _pending_logprobs: list[TokenLogprob] = field(default_factory=list)  # chosen, not yet accepted
    # cumulative time per Generation stage (ns), so the engine can give each stage span a real duration
    stage_ns: dict[str, int] = field(default_factory=dict)

    def _spent(self, stage_id: str, start_ns: int) -> None:
        self.stage_ns[stage_id] = self.stage_ns.get(stage_id, 0) + (time.perf_counter_ns() - start_ns)


class GenerationPipeline:
    """Stateless across requests; all per-request state lives in ``SequenceState``."""

    def __init__(self, tokenizer: Any, *, eos_token_ids: set[int], vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids)
        self.vocab_size = vocab_size
        self._eos_fallback = min(self.eos_token_ids) if self.eos_token_ids else 0
        self._ll_tokenizer: Any = None
        self._special_ids = frozenset(getattr(tokenizer, "special_ids", frozenset()))

    # ------------------------------------------------------------------ request setup
    def _ll(self) -> Any:
        if self._ll_tokenizer is None:
            self._ll_tokenizer = make_ll_tokenizer(self.tokenizer.to_json(), self.vocab_size, self.eos_token_ids)
        return self._ll_tokenizer

    def new_state(
        self, params: SamplingParams, prompt_token_ids: list[int], *, arrival_ns: int | None = None
    ) -> SequenceState:
        """Set up one request; compiles its constraint (raises InvalidRequestError before any work)."""
        tk = self.tokenizer
        constraint = None
        reasoning = None
        rcfg = params.reasoning
        if rcfg is not None:
            tail = b"".join(tk.token_bytes(t) for t in prompt_token_ids[-8:])
            reasoning = ReasoningTracker(rcfg, encode=tk.encode, token_bytes=tk.token_bytes,
                                         prompt_tail=tail)
        if params.constraint is not None:
            spec = params.constraint
            if rcfg is not None and spec.after_marker is None:
                # a thinking model reasons freely; the constraint governs what follows the close delimiter
                spec = Constraint(spec.kind, spec.spec, rcfg.close_delimiter, spec.tool_calls)
            constraint = ConstraintMatcher(spec, self._ll(), self.vocab_size)
        return SequenceState(
            params=params,
            effective=EffectiveSampling.from_params(params, self.vocab_size),
            prompt_token_ids=list(prompt_token_ids),
            penalties=PenaltyState(prompt_token_ids, self.vocab_size, repetition=params.repetition_penalty,
                                   frequency=params.frequency_penalty, presence=params.presence_penalty),
            detokenizer=IncrementalDetokenizer(tk.token_bytes, self._special_ids,
                                               skip_special_tokens=params.skip_special_tokens,
                                               hold_back=params.detokenizer_holdback),
            stops=StopStringMatcher(params.stop),
            clock=StreamClock(arrival_ns if arrival_ns is not None else time.time_ns()),
            constraint=constraint,
            reasoning=reasoning,
            moderator=StreamingModeration(params.moderation) if params.moderation is not None else None,
        )

    # ------------------------------------------------------------------ choosing tokens
    def sample(self, logits: torch.Tensor, states: list[SequenceState]) -> list[int]:
        """One token per row of ``logits`` [B, V] (float32), for the matching state."""
        if logits.dim() != 2 or logits.shape[0] != len(states):
            raise ValueError(f"logits must be [B, V] with B = {len(states)}, got {tuple(logits.shape)}")
        rows = self._rows(logits)
        return [self._choose(st, rows[i], None) for i, st in enumerate(states)]

    def sample_draft_targets(self, state: SequenceState, logits: torch.Tensor, draft: list[int]) -> list[int]:
        """Speculative verification: ``logits`` [k+1, V] are the full model's scores after the sequence and
        after each drafted token. Returns the target tokens position by position, stopping at the first one
        that differs from the draft (so its length is accepted + 1). Seeded sampling draws position ``n``
        from the same stream as without speculation, so the output is the same with and without it."""
        if logits.dim() != 2 or logits.shape[0] < len(draft) + 1:
            raise ValueError(f"need {len(draft) + 1} rows of logits, got {tuple(logits.shape)}")
        rows = self._rows(logits[: len(draft) + 1])
        targets: list[int] = []
        for i in range(len(draft) + 1):
            tok = self._choose(state, rows[i], draft[:i] if i else None)
            targets.append(tok)
            if i < len(draft) and tok != draft[i]:
                break
        return targets

    def _rows(self, logits: torch.Tensor) -> np.ndarray:
        """One host copy of the step's logits as float32 numpy [B, vocab] (padded head rows dropped)."""
        rows = logits.detach().to(device="cpu", dtype=torch.float32).numpy()
        return rows[:, : self.vocab_size] if rows.shape[1] > self.vocab_size else rows

    def _choose(self, st: SequenceState, row: np.ndarray, extra: list[int] | None) -> int:
        if st.finished:
            return self._eos_fallback
        tok = self._choose_token(st, row, extra)
        if st.params.logprobs is not None:
            if not extra:
                st._pending_logprobs.clear()
            st._pending_logprobs.append(self._logprob(row, tok, st.params.logprobs))
        return tok

    def _logprob(self, row: np.ndarray, token_id: int, n: int) -> TokenLogprob:
        x = row.astype(np.float64)
        lp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        top = np.argpartition(-lp, n - 1)[:n] if n else np.zeros(0, dtype=np.int64)
        top = top[np.argsort(-lp[top], kind="stable")]
        return TokenLogprob(token_id, float(lp[token_id]), tuple((int(i), float(lp[i])) for i in top))

    def _choose_token(self, st: SequenceState, row: np.ndarray, extra: list[int] | None) -> int:
        if st.reasoning is not None:
            forced = st.reasoning.forced_token() if not extra else st.reasoning.peek_forced(len(extra))
            if forced is not None:
                return forced
        t0 = time.perf_counter_ns()
        row = st.penalties.apply(row, extra)
        st._spent(S.GEN_PENALTIES, t0)
        if st.constraint is not None:
            t0 = time.perf_counter_ns()
            masked, n_allowed = st.constraint.mask_logits(row, extra)
            st._spent(S.GEN_CONSTRAINED, t0)
            if n_allowed == 0:
                return self._eos_fallback  # dead end: accept() ends the sequence
            row = masked
        t0 = time.perf_counter_ns()
        eff = st.effective
        position = len(st.output_token_ids) + (len(extra) if extra else 0)
        tok = sample_row(row, eff, None if eff.greedy else position_uniform(eff.seed, position))
        st._spent(S.GEN_SAMPLING, t0)
        return tok

    # ------------------------------------------------------------------ committing tokens
    def accept(self, state: SequenceState, token_id: int, now_ns: int) -> TokenResult:
        """Commit one chosen token: constraint, reasoning count, text, stop checks."""
        st = state
        if st.finished:
            return TokenResult("", True, st.finish_reason)
        st.output_token_ids.append(token_id)
        st.penalties.append(token_id)
        if st._pending_logprobs:
            pending = st._pending_logprobs.pop(0)
            if pending.token_id == token_id:
                st.logprobs.append(pending)
        if st.reasoning is not None:
            st.reasoning.commit(token_id)
        is_eos = token_id in self.eos_token_ids and not st.params.ignore_eos
        if st.constraint is not None and not is_eos:
            t0 = time.perf_counter_ns()
            ok = st.constraint.commit(token_id, self.tokenizer.token_bytes(token_id))
            st._spent(S.GEN_CONSTRAINED, t0)
            if not ok:
                return self._finish(st, "", "stop", now_ns, matched="constraint_dead_end")
        if st.constraint is not None and st.constraint.dead_end:
            return self._finish(st, "", "stop", now_ns, matched="constraint_dead_end")
        if is_eos:
            return self._finish(st, "", "stop", now_ns, matched=self._token_name(token_id))
        if token_id in st.params.stop_token_ids:
            return self._finish(st, "", "stop", now_ns, matched=self._token_name(token_id))
        t0 = time.perf_counter_ns()
        piece = st.detokenizer.push(token_id)
        st._spent(S.GEN_DETOKENIZATION, t0)
        t0 = time.perf_counter_ns()
        delta, matched = st.stops.feed(piece) if piece else ("", False)
        st._spent(S.GEN_STOP, t0)
        if matched:
            return self._finish(st, delta, "stop", now_ns, matched=st.stops.matched, flush=False)
        if st.constraint is not None and st.constraint.stopped:
            return self._finish(st, delta, "stop", now_ns, matched="constraint_complete")
        if len(st.output_token_ids) >= st.params.max_tokens:
            return self._finish(st, delta, "length", now_ns)
        mod = st.moderator
        if mod is not None and mod.after_token(len(st.text) + len(delta)) and mod.check(st.text + delta):
            # the check lags the stream: what was emitted stays shown, the sequence ends as filtered
            return self._finish(st, delta, "content_filter", now_ns)
        self._emit(st, delta, now_ns)
        return TokenResult(delta, False, None)

    def finish(self, state: SequenceState, finish_reason: str | None = None) -> TokenResult:
        """End a sequence early: release held-back text. ``finish_reason`` is what the span and the caller
        see (e.g. "length" at the context limit, "abort", "content_filter" from a moderation hook)."""
        if state.finished:
            return TokenResult("", True, state.finish_reason)
        return self._finish(state, "", finish_reason, time.time_ns())

    def _finish(
        self,
        st: SequenceState,
        delta: str,
        reason: str | None,
        now_ns: int,
        *,
        matched: str | None = None,
        flush: bool = True,
    ) -> TokenResult:
        if flush:
            tail = st.detokenizer.flush()
            if tail:
                more, hit = st.stops.feed(tail)
                delta += more
                if hit:
                    matched = st.stops.matched
            if not st.stops.matched:
                delta += st.stops.flush()
        mod = st.moderator
        if mod is not None and reason not in ("content_filter", "abort") and \
                mod.at_end(len(st.text) + len(delta)) and mod.check(st.text + delta):
            reason = "content_filter"
        st.finished = True
        st.stop_matched = matched
        if reason == "stop" and st.constraint is not None and st.constraint.constraint.tool_calls:
            calls = parse_tool_calls(st.text + delta)
            if calls:
                st.tool_calls = calls
                reason = "tool_calls"
        st.finish_reason = reason
        self._emit(st, delta, now_ns)
        return TokenResult(delta, True, reason)

    def _emit(self, st: SequenceState, delta: str, now_ns: int) -> None:
        if delta:
            st.text += delta
            st.clock.chunk(now_ns)
            if st.content_ns is None and (st.reasoning is None or st.reasoning.phase != "thinking"):
                st.content_ns = now_ns

    def _token_name(self, token_id: int) -> str:
        try:
            return self.tokenizer.id_to_token(token_id)
        except (AttributeError, IndexError):
            return str(token_id)

    # ------------------------------------------------------------------ tracing
    def stage_values(self, state: SequenceState) -> dict[str, dict[str, object]]:
        """Boundary values of the Generation stages this pipeline owns (STAGES.md 27-30, 32-34)."""
        st, p, eff = state, state.params, state.effective
        c = st.constraint
        kind = p.constraint.kind if p.constraint is not None else "none"
        output_type = "json" if kind in ("json_schema", "json_object") or (c and c.constraint.tool_calls) else "text"
        r = st.reasoning
        return {
            S.GEN_PENALTIES: {
                N.GEN_AI_REQUEST_FREQUENCY_PENALTY: p.frequency_penalty,
                N.GEN_AI_REQUEST_PRESENCE_PENALTY: p.presence_penalty,
                N.PENALTIES_REPETITION: p.repetition_penalty,
                N.PENALTIES_ON_STRUCTURED_OUTPUT: c is not None and st.penalties.active,
            },
            S.GEN_SAMPLING: {
                N.GEN_AI_REQUEST_TEMPERATURE: p.temperature,
                N.GEN_AI_REQUEST_TOP_P: p.top_p,
                N.GEN_AI_REQUEST_TOP_K: float(p.top_k),
                N.GEN_AI_REQUEST_SEED: p.seed,
                N.SAMPLING_MIN_P: p.min_p,
                N.SAMPLING_GREEDY: eff.greedy,
                N.SAMPLING_EFFECTIVE_TEMPERATURE: eff.temperature,
                N.SAMPLING_EFFECTIVE_TOP_P: eff.top_p,
                N.SAMPLING_EFFECTIVE_TOP_K: eff.top_k,
                N.SAMPLING_EFFECTIVE_SEED: eff.seed,
                N.SAMPLING_CLAMPED: list(eff.clamped),
            },
            S.GEN_CONSTRAINED: {
                N.GEN_AI_OUTPUT_TYPE: output_type,
                N.CONSTRAINT_KIND: kind,
                N.CONSTRAINT_COMPILE_MS: c.compile_ms if c else 0.0,
                N.CONSTRAINT_MASKED_FRACTION: c.masked_fraction_mean if c else 0.0,
                N.CONSTRAINT_FORCED_TOKENS: c.forced_tokens if c else 0,
                N.CONSTRAINT_DEAD_END: bool(c and c.dead_end),
            },
            S.GEN_REASONING_BUDGET: {
                N.REASONING_BUDGET: r.config.budget if r else 0,
                N.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: r.reasoning_tokens if r else 0,
                N.REASONING_FORCED_CLOSE: bool(r and r.forced_close),
            },
            S.GEN_STOP: {
                N.GEN_AI_RESPONSE_FINISH_REASONS: [st.finish_reason] if st.finish_reason else [],
                N.GEN_AI_REQUEST_MAX_TOKENS: p.max_tokens,
                N.GEN_AI_USAGE_OUTPUT_TOKENS: len(st.output_token_ids),
                N.STOP_TRUNCATED: st.finish_reason == "length",
                **self._end_values(st),
            },
            S.GEN_DETOKENIZATION: {
                N.DETOK_HELD_BACK_MAX: st.detokenizer.held_back_max,
                N.DETOK_REPLACEMENT_CHARS: st.detokenizer.replacement_chars,
                N.DETOK_HOLD_BACK: st.detokenizer.hold_back,
                N.DETOK_SKIP_SPECIAL_TOKENS: p.skip_special_tokens,
                N.DETOK_STOP_HOLDBACK_CHARS: st.stops.holdback_max,
                N.DETOK_STOP_LEAKED_CHARS: st.stops.leaked_chars,
            },
            S.GEN_STREAMING: {
                **st.clock.values(),
                # answer text vs a tool call: the first chunk after any thinking, or the call itself
                N.STREAM_FIRST_CONTENT_MS: None if st.tool_calls else st.clock.since_arrival_ms(st.content_ns),
                N.STREAM_FIRST_TOOL_CALL_MS: st.clock.ttft_ms if st.tool_calls else None,
            },
            **_moderation_values(st),
        }

    def _end_values(self, st: SequenceState) -> dict[str, object]:
        """How the sequence ended (tracer/reading/stop_context.py): the end kind, where, and for a stop string
        what the output looked like at the cut. The stop string's text goes out only with full capture."""
        string = st.stops.matched
        last = st.output_token_ids[-1] if st.output_token_ids else None
        by_token = (string is None and st.finish_reason == "stop" and last is not None
                    and last in st.params.stop_token_ids and last not in self.eos_token_ids)
        if st.stop_matched == "constraint_dead_end":
            kind = "error"
        else:
            kind = stop_context.end_kind(st.finish_reason if st.finish_reason != "abort" else None,
                                         matched_stop_string=string is not None, matched_stop_token=by_token,
                                         stop_strings_set=bool(st.params.stop), said_which=True,
                                         aborted=st.finished and st.finish_reason in (None, "abort"))
        return stop_context.stop_values(st.text, kind, string, len(st.params.stop), token_name=None
                                        if string is not None else st.stop_matched)

    def stage_durations_ns(self, state: SequenceState) -> dict[str, int]:
        """Time this pipeline spent per stage for the sequence (summed over steps)."""
        return dict(state.stage_ns)
