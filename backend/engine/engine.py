"""The engine: ``step()`` = schedule -> run the model -> postprocess, over a paged, prefix-cached KV pool.

Thread model: ``add_request`` and ``abort`` may be called from any thread; they only queue a message.
``step()`` (one thread at a time, e.g. ``AsyncEngine``'s worker) applies the messages and does the work.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from llmtrace.backend.engine.block_manager import BlockManager
from llmtrace.backend.engine.block_pool import BlockPool
from llmtrace.backend.engine.config import EngineConfig
from llmtrace.backend.engine.cpu_clock import ThreadCpuClock
from llmtrace.backend.engine.drafting import Drafting
from llmtrace.backend.engine.eviction import make_policy
from llmtrace.backend.engine.host_tier import HostTier
from llmtrace.backend.engine.kv_cache import KVCache
from llmtrace.backend.engine.malloc_tuning import keep_freed_memory
from llmtrace.backend.engine.model_runner import ModelRunner
from llmtrace.backend.engine.pass_telemetry import StepClock, note_forward, note_speculation, note_verify
from llmtrace.backend.engine.prefix_cache import PrefixCache
from llmtrace.backend.engine.request import EngineRequest, RequestOutput
from llmtrace.backend.engine.scheduler import Scheduler, SchedulerOutput
from llmtrace.backend.engine.self_time import StepTimes, charge_step, note_markers
from llmtrace.backend.engine.sequence import Sequence, SequenceStatus
from llmtrace.backend.engine.stage_emitter import EngineFacts, emit
from llmtrace.backend.generation.params import InvalidRequestError, SamplingParams
from llmtrace.backend.generation.pipeline import GenerationPipeline
from llmtrace.backend.kernels.selection import select_backend
from llmtrace.backend.model.compute_path import choose
from llmtrace.backend.model.gguf_reader import GGUFModelFile
from llmtrace.backend.model.llama import LlamaModel
from llmtrace.tracer.registry import stage_ids as S


@dataclass(slots=True)
class StepMetadata:
    """What one step did (kept as ``engine.last_step`` for tests, benchmarks and the server's stats)."""

    step: int = 0
    start_ns: int = 0
    end_ns: int = 0
    num_seqs: int = 0
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0
    preempted: list[str] = field(default_factory=list)
    sections_ms: dict[str, float] = field(default_factory=dict)


def load_model(model_path: str | Path | None, dtype: str, decode: str = "auto",
               device: str = "cpu") -> tuple[LlamaModel, Any]:
    """``None`` = the default model, ``"tiny"`` = random tiny weights with the default model's tokenizer.
    ``dtype``/``decode`` (``auto`` or an override) pick the compute path for ``device`` (compute_path.py)."""
    from llmtrace.backend.model.pull import default_model_path
    from llmtrace.backend.model.tokenizer import Tokenizer

    compute = choose(device, dtype, decode)
    gguf = Path(model_path) if model_path not in (None, "tiny") else default_model_path()
    if not gguf.is_file():
        hint = " (run `llmtrace model pull`)" if model_path in (None, "tiny") else ""
        raise ValueError(f"model file {gguf} not found{hint}")
    if model_path == "tiny":  # random weights: no 4-bit codes to decode on
        model = LlamaModel.tiny(compute.dtype, wide=compute.prefill_dtype, int_gemm=bool(compute.prefill_gemm))
        model.compute_path = replace(compute, int4_decode=False)
        return model, Tokenizer.from_gguf(gguf)
    file = GGUFModelFile(gguf)  # parsed once, shared by the weights and the tokenizer
    return LlamaModel.from_gguf_path(file, compute), Tokenizer.from_gguf(gguf, reader=file.reader)


class Engine:
    def __init__(self, model_path: str | Path | None = None, config: EngineConfig | None = None) -> None:
        config = config or EngineConfig()
        keep_freed_memory()  # before loading: the load's big temporaries benefit too
        model, tokenizer = load_model(model_path, config.dtype, config.decode, config.device)
        self._setup(model.to(config.device), tokenizer, config)

    @classmethod
    def from_model(cls, model: LlamaModel, tokenizer: Any, config: EngineConfig | None = None) -> Engine:
        engine = cls.__new__(cls)
        engine._setup(model, tokenizer, config or EngineConfig(dtype=_dtype_name(model.dtype)))
        return engine

    def _setup(self, model: LlamaModel, tokenizer: Any, config: EngineConfig) -> None:
        if config.dtype == "auto":  # the model was loaded on the path chosen for this host: its dtype is the one
            config = replace(config, dtype=_dtype_name(model.dtype))
        if _dtype_name(model.dtype) != config.dtype:
            raise ValueError(f"the model is {_dtype_name(model.dtype)} but the engine config says {config.dtype}")
        if model.device != torch.device(config.device):
            raise ValueError(f"the model is on {model.device} but the engine config says {config.device}; "
                             "use model.to(device)")
        torch.set_grad_enabled(False)
        keep_freed_memory()
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        cfg = model.config
        self.config = config
        self.model = model
        self.model_config = cfg
        self.tokenizer = tokenizer
        self.attention = select_backend(config.device, config.attention_backend, config.batch_invariant)
        self.kv = KVCache(cfg, config.num_blocks, config.block_size, model.dtype, config.device)
        self.pool = BlockPool(config.num_blocks, config.block_size)
        self.prefix_cache = PrefixCache() if config.enable_prefix_cache else None
        host = HostTier(config.host_tier_blocks, self.kv) if config.host_tier_blocks else None
        self.blocks = BlockManager(self.pool, make_policy(config.eviction_policy),
                                   watermark_blocks=config.watermark_blocks, prefix_cache=self.prefix_cache,
                                   host_tier=host)
        self.scheduler = Scheduler(config, self.blocks)
        self.runner = ModelRunner(model, self.kv, self.attention, config.batch_invariant, config.stage_timing)
        eos = set(getattr(tokenizer, "eos_token_ids", ()) or ())
        if cfg.eos_token_id is not None:
            eos.add(cfg.eos_token_id)
        self.pipeline = GenerationPipeline(tokenizer, eos_token_ids=eos, vocab_size=cfg.vocab_size)
        self.drafting = Drafting(self.runner)
        pool_tokens = (config.num_blocks - config.watermark_blocks) * config.block_size
        self.max_model_len = min(config.max_model_len or cfg.max_position, pool_tokens)
        labels = model.path_labels()
        self.facts = EngineFacts(
            model_name=model.path.stem if model.path else cfg.name,
            dtype=config.dtype,
            hidden_size=cfg.hidden_size,
            vocab_size=cfg.vocab_size,
            rope_theta=cfg.rope_theta,
            trained_context=cfg.max_position,
            num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads,
            intermediate_size=cfg.intermediate_size,
            num_params=cfg.num_parameters(),
            lm_head_params=cfg.vocab_size * cfg.hidden_size,
            block_size=config.block_size,
            kv_bytes_per_token=self.kv.bytes_per_token,
            eviction_policy=config.eviction_policy,
            watermark=config.watermark,
            attention_backend=self.attention.name,
            attention_reason=self.attention.reason,
            attention_fallback=self.attention.fallback,
            attention_path=str(getattr(self.attention.backend, "kernel_path", self.attention.name)),
            invariant=config.batch_invariant,
            prefix_cache=config.enable_prefix_cache,
            host_tier_blocks=config.host_tier_blocks,
            num_blocks=config.num_blocks,
            prefill_path=labels[0],
            decode_path=labels[1],
        )
        self._lock = threading.Lock()
        self._inbox: list[tuple[str, Any]] = []
        self._seqs: dict[str, Sequence] = {}
        self._ids = itertools.count()
        self._steps = 0
        self._cpu = ThreadCpuClock()  # the engine thread's CPU time and run-queue wait per step
        self.last_step = StepMetadata()
        self._finishing: list[tuple[Sequence, str]] | None = None
        self.last_emit_ns = 0
        self.emit_ns_total = 0
        self.tokens_generated = 0
        # optional hook: called with (request_id, float32 logits [rows, vocab]) whenever a sequence gets logits
        self.logits_sink: Callable[[str, torch.Tensor], None] | None = None

    # requests ---------------------------------------------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request; raises InvalidRequestError (a ValueError) before any work when it cannot run."""
        prompt = list(request.prompt_token_ids)
        vocab = self.model_config.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", "prompt")
        if len(prompt) >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {len(prompt)} tokens; this engine holds at most {self.max_model_len - 1} "
                f"(context {self.max_model_len})", "prompt")
        setup_start = time.time_ns()
        state = self.pipeline.new_state(request.params, prompt, arrival_ns=request.arrival_ns)
        arrival = request.arrival_ns or time.time_ns()
        seq = Sequence(request=request, gen=state, seq_id=next(self._ids), arrival_ns=arrival,
                       token_ids=prompt, num_prompt_tokens=len(prompt))
        # The engine's share of the pass starts here (before it the caller, the server's intake, was
        # timing). Setting the request up is generation's work: compiling a constraint (the first one also
        # builds the tokenizer's grammar tables), or the sampler's and penalties' state.
        setup_end = time.time_ns()
        seq.stats.self_time.charge(S.GEN_CONSTRAINED if request.params.constraint is not None else S.GEN_SAMPLING,
                                   setup_end - setup_start)
        seq.stats.self_time.accounted_until = setup_end
        with self._lock:
            if request.request_id in self._seqs or any(m == "add" and s.request_id == request.request_id
                                                       for m, s in self._inbox):
                raise InvalidRequestError(f"request id {request.request_id!r} is already in the engine", "request_id")
            self._inbox.append(("add", seq))

    def encode_prompt(self, prompt: str | list[dict[str, Any]]) -> list[int]:
        """Token ids of a plain-text prompt, or of chat messages rendered with the model's chat template."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        return self.tokenizer.encode(self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True))

    def generate(self, prompt: str | list[dict[str, Any]] | list[int], params: SamplingParams,
                 request_id: str | None = None) -> Iterator[RequestOutput]:
        """Run one request to the end on this thread, yielding its outputs (for scripts and tests; with
        concurrent callers use ``AsyncEngine``)."""
        ids = prompt if prompt and isinstance(prompt[0], int) else self.encode_prompt(prompt)  # type: ignore[arg-type]
        rid = request_id or f"gen-{next(self._ids)}"
        self.add_request(EngineRequest(rid, list(ids), params))  # type: ignore[arg-type]
        while True:
            for out in self.step():
                if out.request_id == rid:
                    yield out
                    if out.finished:
                        return

    def abort(self, request_id: str) -> None:
        """Stop a request; its blocks go back to the pool at the next step (unknown ids are ignored)."""
        with self._lock:
            self._inbox.append(("abort", request_id))

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._inbox) or self.scheduler.has_work() or bool(self._seqs)

    def longest_cached_prefix(self, token_ids: list[int]) -> int:
        """Prompt tokens a new request with these ids would find cached (for prefix-aware routing)."""
        return self.blocks.longest_cached_prefix(list(token_ids))

    def stats(self) -> dict[str, Any]:
        pc = self.prefix_cache
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "num_blocks": self.pool.num_blocks,
            "free_blocks": self.pool.num_free,
            "cached_blocks": self.pool.num_evictable,
            "available_blocks": self.pool.num_available,
            "pool_utilization": round(self.pool.utilization(), 4),
            "prefix_hit_rate": round(pc.hit_rate(), 4) if pc else 0.0,
            "prefix_cached_blocks": len(pc) if pc else 0,
            "evicted_blocks": self.blocks.total_evicted,
            "host_tier_blocks": len(self.blocks.host_tier) if self.blocks.host_tier else 0,
            "steps": self._steps,
            "span_emit_ms_total": round(self.emit_ns_total / 1e6, 3),
            "tokens_generated": self.tokens_generated,
            "attention_backend": self.attention.name,
            "attention_reason": self.attention.reason,
            "batch_invariant": self.config.batch_invariant,
            "dtype": self.config.dtype,
            "compute_path": self.compute_path_summary(),
        }

    def compute_path_summary(self) -> str:
        """One line for the ready line and ``stats``: each phase's arithmetic and the CPU that chose it."""
        cp = self.model.compute_path
        cpu = f" cpu={cp.features.isa}" if cp.features else ""
        forced = f" forced={cp.features.forced}" if cp.features and cp.features.forced != "auto" else ""
        return f"prefill={self.facts.prefill_path} decode={self.facts.decode_path}{cpu}{forced}"

    # the loop ---------------------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        outputs = self._drain_inbox()
        draft_start = time.time_ns()
        self.drafting.propose(self.scheduler.running, self.max_model_len)
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return outputs
        self._steps += 1
        start = sched.start_ns
        cpu0, wait0 = self._cpu.read()
        inputs = self.runner.prepare(sched.scheduled)
        prepared = time.time_ns()
        self.drafting.fill_self_drafts(sched.scheduled, inputs)
        drafted = [bool(item.seq.draft) for item in sched.scheduled]  # postprocess clears the drafts
        t_spec = time.time_ns()
        logits, clock = self.runner.run(inputs)
        end = time.time_ns()
        cpu1, wait1 = self._cpu.read()
        cpu = (cpu1 - cpu0, None if wait0 is None or wait1 is None else wait1 - wait0)
        sections = clock.totals()
        self._finishing = []  # passes that finish this step are emitted once the step's time is charged
        try:
            outputs += self._postprocess(sched, inputs.logits_rows, logits, sections, start, end, t_spec, cpu)
            times = StepTimes(draft_start, sched.start_ns, sched.end_ns, prepared, t_spec, end, time.time_ns(),
                              sections)
            for item, did_draft in zip(sched.scheduled, drafted, strict=True):
                charge_step(item.seq, times, is_prefill=item.is_prefill, drafted=did_draft)
                note_markers(item.seq, self.pipeline)
        finally:
            finishing, self._finishing = self._finishing, None
            for seq, status in finishing:
                self._emit(seq, status)
        return outputs

    def _postprocess(
        self,
        sched: SchedulerOutput,
        rows: tuple[tuple[int, int], ...],
        logits: torch.Tensor,
        sections: dict[str, float],
        start: int,
        end: int,
        verify_start: int,
        cpu: tuple[int, int | None],
    ) -> list[RequestOutput]:
        batch = len(sched.scheduled)
        meta = StepMetadata(step=self._steps, start_ns=start, end_ns=end, num_seqs=batch,
                            num_tokens=sched.num_batched_tokens, preempted=[s.request_id for s in sched.preempted],
                            sections_ms=sections)
        clock = StepClock(start, end, sched.start_ns, sched.end_ns, verify_start, batch, sections,
                          self.kv.bytes_per_token, *cpu)
        plain: list[tuple[Sequence, int]] = []
        spec: list[tuple[Sequence, int, int]] = []
        for item, (row, count) in zip(sched.scheduled, rows, strict=True):
            seq = item.seq
            first_pos = seq.num_computed_tokens
            seq.num_computed_tokens += item.num_tokens
            note_forward(seq, clock, tokens=item.num_tokens, first_pos=first_pos, is_prefill=item.is_prefill)
            if item.is_prefill:
                meta.num_prefill_tokens += item.num_tokens
            else:
                meta.num_decode_seqs += 1
            if count == 0:
                continue
            if seq.draft:
                spec.append((seq, row, count))
                note_verify(seq, clock)
            else:
                plain.append((seq, row))
        self.last_step = meta
        if self.logits_sink is not None:
            for seq, row in plain:
                self.logits_sink(seq.request_id, logits[row : row + 1])
            for seq, row, count in spec:
                self.logits_sink(seq.request_id, logits[row : row + count])
        chosen: dict[int, list[int]] = {}
        if plain:
            picked_rows = torch.tensor([row for _, row in plain], dtype=torch.long)
            tokens = self.pipeline.sample(logits.index_select(0, picked_rows), [seq.gen for seq, _ in plain])
            for (seq, _), tok in zip(plain, tokens, strict=True):
                chosen[seq.seq_id] = [tok]
        for seq, row, count in spec:
            targets = self.pipeline.sample_draft_targets(seq.gen, logits[row : row + count], seq.draft)
            accepted = len(targets) - 1
            note_speculation(seq, accepted=accepted, verified_together=len(spec))
            seq.num_computed_tokens -= len(seq.draft) - accepted  # rejected drafts' keys/values are stale
            chosen[seq.seq_id] = targets
        outputs = []
        now = time.time_ns()
        for item in sched.scheduled:
            seq = item.seq
            seq.draft = []
            new = chosen.get(seq.seq_id)
            if new is None:
                self.blocks.register_full_blocks(seq)
                continue
            outputs.append(self._accept(seq, new, now))
        return outputs

    def _accept(self, seq: Sequence, new: list[int], now: int) -> RequestOutput:
        """Commit sampled tokens to a sequence and turn them into its output for this step."""
        kept: list[int] = []
        delta = ""
        finished = False
        reason: str | None = None
        logprobs_before = len(seq.gen.logprobs)
        for tok in new:
            seq.token_ids.append(tok)
            kept.append(tok)
            res = self.pipeline.accept(seq.gen, tok, now)
            delta += res.text_delta
            if res.finished:
                finished, reason = True, res.finish_reason
                break
            if seq.num_tokens >= self.max_model_len:
                res = self.pipeline.finish(seq.gen, "length")
                delta += res.text_delta
                finished, reason = True, "length"
                break
        self.tokens_generated += len(kept)
        s = seq.stats
        if not s.first_token_ns:
            s.first_token_ns = now
        if delta and not s.first_text_ns:
            s.first_text_ns = now
        s.last_token_ns = now
        # keys/values exist only for tokens before the last one; a speculative step may have gone further
        seq.num_computed_tokens = min(seq.num_computed_tokens, seq.num_tokens - 1)
        self.blocks.register_full_blocks(seq)
        self.blocks.truncate(seq, seq.num_tokens)
        if finished:
            self._finish(seq, reason)
        logprobs = seq.gen.logprobs[logprobs_before:] if seq.request.params.logprobs is not None else None
        return self._output(seq, kept, delta, finished, reason, logprobs)

    def _output(self, seq: Sequence, new: list[int], delta: str, finished: bool, reason: str | None,
                logprobs: list[Any] | None = None) -> RequestOutput:
        calls = getattr(seq.gen, "tool_calls", None) if finished else None
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=new,
            text_delta=delta,
            finished=finished,
            finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            num_output_tokens=seq.num_output_tokens,
            tool_calls=calls or None,
            logprobs=logprobs,
            stop_sequence=getattr(seq.gen, "stop_matched", None) if finished else None,
        )

    def _finish(self, seq: Sequence, reason: str | None, status: str = "ok") -> None:
        seq.finish_reason = reason
        self.scheduler.remove(seq)
        self.blocks.free(seq)
        seq.status = SequenceStatus.FINISHED
        self._seqs.pop(seq.request_id, None)
        if self._finishing is not None:
            self._finishing.append((seq, status))
        else:  # aborted between steps: its time since the last step was waiting
            seq.stats.self_time.wait_until(time.time_ns(), seq.arrival_ns)
            self._emit(seq, status)

    def _emit(self, seq: Sequence, status: str) -> None:
        started = time.perf_counter_ns()
        try:
            emit(seq, self.facts, self.pool.num_available, self.pipeline, status)
        except Exception:  # the tracer must never break the engine
            import logging

            logging.getLogger("llmtrace.engine").exception("emitting stage spans failed for %s", seq.request_id)
        finally:
            # what recording the pass costs the engine (after the pass's own time was charged): the
            # tracer's own overhead, kept so it can be seen (stats) and told apart from the pass
            self.last_emit_ns = time.perf_counter_ns() - started
            self.emit_ns_total += self.last_emit_ns

    def _drain_inbox(self) -> list[RequestOutput]:
        with self._lock:
            inbox, self._inbox = self._inbox, []
        outputs = []
        for kind, item in inbox:
            if kind == "add":
                self._seqs[item.request_id] = item
                self.scheduler.add(item)
                continue
            seq = self._seqs.get(item)
            if seq is None or seq.finished:
                continue
            res = self.pipeline.finish(seq.gen)
            self._finish(seq, "abort", status="cancelled")
            outputs.append(self._output(seq, [], res.text_delta, True, "abort"))
        return outputs


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(dtype, str(dtype))
