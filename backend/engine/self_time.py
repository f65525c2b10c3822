"""Each pass's wall clock inside the engine, split across the stages that spent it (exclusive time).

A stage span of the engine is an envelope: attention runs in every step of a pass, interleaved with the
feed-forward and the sampling, so its span runs from the first step to the last. What a person asks is
"how much of *my* pass went to attention", and that is what this module adds up, step by step:

    arrival ─ wait ─┬ step ─────────────────────────────────────────────┬ wait ┬ step ...
                    │ drafting │ schedule │ batch │ forward │ postprocess │
                     gen.spec.  cache.*    forward forward.* sections,    own generation stages
                                           .batching  remainder → prefill/decode;  others' → forward.batching

Every nanosecond between the engine's arrival and the end of the pass's last step lands in exactly one
stage, so the parts sum to the engine's share of the wall clock by construction; a step shared with other
sequences counts whole for each of them (each one waited for all of it), and the part spent on the others'
sampling is charged to ``forward.batching``: the price of sharing a batch. Waiting between steps (not
scheduled, preempted, queued before the first step) is ``forward.batching`` too, and is also kept apart
as ``wait_ns`` / ``queue_ns`` so the TTFT breakdown can name the queue.

Forward sections come from ``ForwardClock``, which uses CUDA events on a GPU and reads them only after the
step's own synchronisation (copying the sampled tokens to the host): timing never adds a sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmtrace.backend.engine.pass_telemetry import FORWARD_WINDOW
from llmtrace.tracer.registry import stage_ids as S

if TYPE_CHECKING:
    from llmtrace.backend.engine.sequence import Sequence

# ForwardClock section -> the stage that owns its time
SECTION_STAGE = {
    "embedding": S.FORWARD_EMBEDDING,
    "positional": S.FORWARD_POSITIONAL,
    "attention": S.FORWARD_ATTENTION,
    "feed_forward": S.FORWARD_FEED_FORWARD,
    "lm_head": S.GEN_LM_HEAD,
}

# Stages whose work happens inside another stage's timed section: they report 0 ms of their own and name
# where their time is counted, instead of claiming the envelope.
COUNTED_IN = {
    S.CACHE_KV_WRITE: S.FORWARD_ATTENTION,
    S.FORWARD_ATTENTION_VARIANT: S.FORWARD_ATTENTION,
    S.CACHE_EVICTION: S.CACHE_BLOCK_ALLOCATION,
}


@dataclass(slots=True)
class StepTimes:
    """Clock readings of one engine step (ns, ``time.time_ns``)."""

    draft_start: int
    sched_start: int
    sched_end: int
    prepared: int
    run_start: int
    run_end: int
    post_end: int = 0
    sections_ms: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class SelfTime:
    """One pass's exclusive time per stage, charged step by step."""

    ns: dict[str, int] = field(default_factory=dict)
    accounted_until: int = 0  # everything before this instant is charged somewhere
    queue_ns: int = 0  # waited before the first step
    wait_ns: int = 0  # waited between steps (not scheduled, preempted)
    post_ns: int = 0  # postprocess windows of its steps (its own generation work plus the others')
    steps: int = 0
    ttft_ns: dict[str, int] | None = None  # ``exclusive()`` as it stood when the first token was sampled
    ttft_at_ns: int = 0  # end of the step that sampled the first token
    first_text_at_ns: int = 0  # end of the step whose output first carried text

    def charge(self, stage: str, ns: int) -> None:
        if ns > 0:
            self.ns[stage] = self.ns.get(stage, 0) + ns

    def wait_until(self, instant: int, start: int) -> None:
        """Charge the time since the last step (or since ``start``, the engine arrival) as waiting."""
        since = self.accounted_until or start
        gap = max(0, instant - since)
        if self.steps == 0:
            self.queue_ns += gap
        else:
            self.wait_ns += gap
        self.charge(S.FORWARD_BATCHING, gap)
        self.accounted_until = max(since, instant)


def charge_step(seq: Sequence, t: StepTimes, *, is_prefill: bool, drafted: bool) -> None:
    """Add one step the sequence took part in to its exclusive times."""
    st: SelfTime = seq.stats.self_time
    st.wait_until(t.draft_start, seq.arrival_ns)
    # drafting (n-gram proposal before scheduling, self-drafting between prepare and run) is speculation's
    # own time for a sequence that drafted; for the others it is the batch's overhead
    draft_ns = (t.sched_start - t.draft_start) + (t.run_start - t.prepared)
    st.charge(S.GEN_SPECULATION if drafted else S.FORWARD_BATCHING, draft_ns)
    # scheduling: the prefix lookup of a newly admitted pass, host-tier moves, then block allocation
    sched = t.sched_end - t.sched_start
    lookup0, lookup1 = seq.stats.prefix_lookup_ns
    lookup = lookup1 - lookup0 if t.sched_start <= lookup0 <= t.sched_end else 0
    offload = min(int(seq.stats.offload_ms * 1e6) - st.ns.get(S.CACHE_HOST_OFFLOAD, 0), sched - lookup)
    st.charge(S.CACHE_PREFIX_MATCH, lookup)
    st.charge(S.CACHE_HOST_OFFLOAD, max(0, offload))
    st.charge(S.CACHE_BLOCK_ALLOCATION, sched - lookup - max(0, offload))
    st.charge(S.FORWARD_BATCHING, t.prepared - t.sched_end)  # assembling the batch's input tensors
    run = t.run_end - t.run_start
    timed = 0
    for section, ms in t.sections_ms.items():
        stage = SECTION_STAGE.get(section)
        if stage is not None:
            ns = min(int(ms * 1e6), run - timed)
            st.charge(stage, ns)
            timed += ns
    # what the clock's sections do not cover (norms, residual adds, the runner's glue) is the pass's own
    # prefill or decode work
    st.charge(S.FORWARD_PREFILL if is_prefill else S.FORWARD_DECODE, run - timed)
    st.post_ns += max(0, t.post_end - t.run_end)
    st.accounted_until = t.post_end
    st.steps += 1
    # the forward envelope covers whole steps, postprocess included: a server step recorded after the pass's
    # last step (sending a buffered response) then starts where the engine's own time ended
    seq.stats.window(FORWARD_WINDOW, t.sched_start, t.post_end)


def exclusive(seq: Sequence, pipeline: Any) -> dict[str, int]:
    """Stage -> exclusive ns so far: the charged steps plus the generation pipeline's own stages, whose time
    is taken out of the postprocess windows (the rest of those windows is the batch's)."""
    st: SelfTime = seq.stats.self_time
    out = dict(st.ns)
    own = {k: int(v) for k, v in pipeline.stage_durations_ns(seq.gen).items() if v > 0}
    own_total = sum(own.values())
    for stage, ns in own.items():
        out[stage] = out.get(stage, 0) + ns
    shared = st.post_ns - own_total
    if shared > 0:
        out[S.FORWARD_BATCHING] = out.get(S.FORWARD_BATCHING, 0) + shared
    return out


def note_markers(seq: Sequence, pipeline: Any) -> None:
    """After a step: freeze the split as it stood when the first token was sampled, and note when the
    first text left the detokenizer (later, when it held back the first token's bytes)."""
    st: SelfTime = seq.stats.self_time
    if st.ttft_ns is None and seq.stats.first_token_ns:
        st.ttft_ns = exclusive(seq, pipeline)
        st.ttft_at_ns = st.accounted_until
    if not st.first_text_at_ns and seq.stats.first_text_ns:
        st.first_text_at_ns = st.accounted_until
