"""What one engine step leaves on each sequence's stats for its stage spans (``stage_emitter.py`` turns them
into spans when the pass ends). Kept apart from ``Engine._postprocess`` so the engine's own work — computed
tokens, sampling, acceptance — reads top to bottom there, and the telemetry is counted in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmtrace.tracer.registry import stage_ids as S

if TYPE_CHECKING:  # self_time.py imports FORWARD_WINDOW from here; sequence.py reaches self_time.py
    from llmtrace.backend.engine.sequence import Sequence

# The envelope of the stages that run inside every forward step (embedding, attention, feed-forward, ...):
# the emitter draws a stage without a window of its own over it.
FORWARD_WINDOW = "forward"


@dataclass(frozen=True, slots=True)
class StepClock:
    """One step's times and shape: the same for every sequence the step ran."""

    start_ns: int  # the step's start (the scheduler's)
    end_ns: int  # when the forward pass returned
    sched_start_ns: int
    sched_end_ns: int
    verify_start_ns: int  # when the speculative verification began
    batch: int  # sequences in the step
    sections: dict[str, float]  # the forward clock's per-section milliseconds
    kv_bytes_per_token: int
    # the engine thread's on-CPU time and run-queue wait from preparing the step's inputs to the forward's
    # return (cpu_clock.py); wait None where the platform does not say
    cpu_ns: int = 0
    cpu_wait_ns: int | None = None

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def note_forward(seq: Sequence, step: StepClock, *, tokens: int, first_pos: int, is_prefill: bool) -> None:
    """The step's forward work on one sequence (called once its computed tokens moved past ``first_pos``)."""
    s = seq.stats
    s.kv_tokens_written += tokens
    s.embedded_tokens += tokens
    s.max_position = max(s.max_position, seq.num_computed_tokens - 1)
    s.kv_len_max = max(s.kv_len_max, seq.num_computed_tokens)
    s.add_sections(step.sections)
    s.add_batch(step.batch, str(step.batch))
    s.window(FORWARD_WINDOW, step.start_ns, step.end_ns)
    # the pool's stages run while the scheduler places the sequence
    s.window(S.CACHE_BLOCK_ALLOCATION, step.sched_start_ns, step.sched_end_ns)
    s.window(S.CACHE_EVICTION, step.sched_start_ns, step.sched_end_ns)
    s.window(S.CACHE_HOST_OFFLOAD, step.sched_start_ns, step.sched_end_ns)
    if is_prefill:
        s.prefill_tokens += tokens
        s.prefill_chunks += 1
        s.prefill_ms += step.ms
        s.prefill_cpu_ns += step.cpu_ns
        if step.cpu_wait_ns is not None:
            s.prefill_cpu_wait_ns = (s.prefill_cpu_wait_ns or 0) + step.cpu_wait_ns
        s.window(S.FORWARD_PREFILL, step.start_ns, step.end_ns)
    else:
        s.decode_steps += 1
        s.decode_ms += step.ms
        s.kv_bytes_read += first_pos * step.kv_bytes_per_token
        s.window(S.FORWARD_DECODE, step.start_ns, step.end_ns)


def note_verify(seq: Sequence, step: StepClock) -> None:
    """The sequence's drafted tokens are verified in this step."""
    seq.stats.window(S.GEN_SPECULATION, step.verify_start_ns, step.end_ns)


def note_speculation(seq: Sequence, *, accepted: int, verified_together: int) -> None:
    """One verification's outcome (before the rejected drafts are taken back from ``seq.draft``'s count)."""
    s = seq.stats
    s.spec_steps += 1
    s.spec_drafted += len(seq.draft)
    s.spec_accepted += accepted
    s.spec_batch_sum += verified_together
