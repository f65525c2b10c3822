"""The request flow of a generation endpoint, stage by stage:

    arrival.connection -> (parse) -> arrival.model_routing -> intake.normalization -> intake.chat_template
    -> intake.tokenization -> arrival.admission -> arrival.replica_selection -> arrival.stream_setup
    -> engine (cache, forward and generation stages, under the same pass span) -> response

Intake runs before admission so a request that can never run (bad messages, prompt past the context)
is refused without holding a queue slot, and so the replica choice can look at the prompt's tokens.
A client that leaves at any point cancels the work: the engine aborts the sequence and returns its
blocks, and the pass span ends with status ``cancelled``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from llmtrace.backend.engine.request import EngineRequest
from llmtrace.backend.generation.params import InvalidRequestError
from llmtrace.backend.server import anthropic_protocol as anth
from llmtrace.backend.server import openai_protocol as oai
from llmtrace.backend.server import responses_protocol as resp
from llmtrace.backend.server.admission import Admission, Shed
from llmtrace.backend.server.asgi_io import (
    ClientGone,
    ConnectionTracker,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    send_json,
    wait_disconnect,
)
from llmtrace.backend.server.collected import Collected, TokenClock, generate
from llmtrace.backend.server.config import ServerConfig
from llmtrace.backend.server.engine_span import EngineSpanView
from llmtrace.backend.server.errors import Api, APIError, bad_request, internal_error, render_error
from llmtrace.backend.server.http_guard import ConnectionLimits
from llmtrace.backend.server.intake import Intake, IntakeResult, context_exceeded
from llmtrace.backend.server.job import Job, Outcome
from llmtrace.backend.server.replica_set import ReplicaSet, Selection
from llmtrace.backend.server.request_body import decode_body, off_loop
from llmtrace.backend.server.routing import ModelRouter
from llmtrace.backend.server.tool_gate import ToolGate
from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec
from llmtrace.tracer import semconv as sc
from llmtrace.tracer.record import run_queue
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

log = logging.getLogger("llmtrace.serve")

OFF_LOOP_CHARS = 32 << 10  # prompts past this many characters go through intake on a worker thread
OFF_LOOP_BYTES = 1 << 20  # bodies past this size are parsed on a worker thread
SHUTDOWN_MESSAGE = "server shutdown: the request was still running when the drain period ended"
ID_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-", "messages": "msg_", "responses": resp.ID_PREFIX}


@dataclass(slots=True)
class Exchange:
    """One HTTP request's state while it is served."""

    endpoint: str
    pass_span: rec.PassSpan
    arrival_ns: int
    headers: list[tuple[str, str]]
    waited0: int | None = None  # run_queue.threads_wait() of the TTFT's threads at arrival
    threads: tuple[int, ...] = ()  # ... and which threads those were
    started: bool = False  # response headers sent
    outputs: list[str] = field(default_factory=list)
    cut: bool = False  # cancelled by the server's shutdown (after the drain period), not by the client
    view: EngineSpanView | None = None  # the pass span as handed to the engine, once it is

    @property
    def api(self) -> Api:
        return "anthropic" if self.endpoint == "messages" else "openai"


class GenerationService:
    def __init__(self, cfg: ServerConfig, router: ModelRouter, replicas: ReplicaSet, intake: Intake,
                 admission: Admission, limits: ConnectionLimits | None = None) -> None:
        self.cfg = cfg
        self.limits = limits or ConnectionLimits()
        self.router = router
        self.replicas = replicas
        self.intake = intake
        self.admission = admission
        self.connections = ConnectionTracker()
        self.draining = False
        self.in_flight = 0
        self.counts: Counter[str] = Counter()
        self.max_model_len = min(r.max_model_len for r in replicas)
        self._running: dict[asyncio.Future[None], Exchange] = {}
        self.responses = resp.ResponsesStore()  # recent conversations, for previous_response_id
        # Intake and JSON parsing of large bodies: few threads, so big requests wait for each other rather
        # than for the event loop.
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmtrace-intake")

    def _ttft_threads(self) -> list[int]:
        """The threads a request's first token waits on: this event loop's and every engine's stepping thread."""
        return [threading.get_native_id(),
                *(r.async_engine.stepping_thread for r in self.replicas if r.async_engine.stepping_thread)]

    # ───────────────────────────────────────────────────────────── entry
    async def handle(self, endpoint: str, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = rec.now_ns()
        threads = self._ttft_threads()
        waited0 = run_queue.threads_wait(threads)  # their wait for a CPU so far (TTFT's share)
        reused = self.connections.note(scope)
        api: Api = "anthropic" if endpoint == "messages" else "openai"
        try:
            raw = await read_body(receive, self.cfg.max_body_bytes, self.limits.body_timeout_s)
        except ClientGone:
            return
        except APIError as err:
            self.counts[f"{endpoint}:{err.status}"] += 1
            rendered = render_error(err, api)
            await _send_rendered(send, rendered, [("connection", "close")])
            return
        body_done = rec.now_ns()
        if len(raw) < OFF_LOOP_BYTES:
            body, parse_error = decode_body(raw)
        else:
            body, parse_error = await off_loop(self._workers, decode_body, raw)
        requested = body.get("model") if isinstance(body, dict) and isinstance(body.get("model"), str) else None
        pass_span = rec.start_pass(
            requested or "unknown",
            operation="text_completion" if endpoint == "completions" else "chat",
            side="server", provider="llmtrace", traceparent=header(scope, "traceparent"), start_ns=arrival,
        )
        server = scope.get("server") or ("", 0)
        rec.record_stage(S.ARRIVAL_CONNECTION, start_ns=arrival, end_ns=body_done, parent=pass_span, values={
            N.SERVER_ADDRESS: str(server[0]),
            N.SERVER_PORT: int(server[1] or 0),
            N.CONNECTION_REUSED: reused,
            # The server cannot see the handshake; a reused connection certainly cost nothing.
            N.CONNECTION_CONNECT_MS: 0.0 if reused else None,
        })
        ex = Exchange(endpoint, pass_span, arrival, [("x-llmtrace-trace-id", pass_span.trace_id),
                                                     ("x-llmtrace-span-id", pass_span.span_id)],
                      waited0=waited0, threads=tuple(threads))
        self.in_flight += 1
        work = asyncio.ensure_future(self._serve(ex, body, parse_error, send))
        self._running[work] = ex
        watch = asyncio.ensure_future(wait_disconnect(receive))
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                try:
                    await work
                except asyncio.CancelledError:
                    pass
        finally:
            watch.cancel()
            self._running.pop(work, None)
            self.in_flight -= 1

    def cut_all(self) -> int:
        """Shutdown after the drain period: end every request still running with a proper error (an SSE error
        event on a stream, a 503 otherwise), recorded as a server shutdown. Returns how many were cut."""
        cut = 0
        for work, ex in list(self._running.items()):
            if not work.done():
                ex.cut = True
                work.cancel()
                cut += 1
        return cut

    # ───────────────────────────────────────────────────────────── the flow
    async def _serve(self, ex: Exchange, body: Any, parse_error: APIError | None, send: Send) -> None:
        ps = ex.pass_span
        admitted = False
        started = time.perf_counter()
        try:
            if parse_error is not None:
                raise parse_error
            if self.draining:
                raise APIError(503, "the server is shutting down and takes no new requests", retry_after_s=5)
            job = self._parse(ex.endpoint, body)
            self._set_request_values(ps, job)
            route_model = self._route(job, ps)
            intake = await self._intake(job, ps)
            job.params = self._fit_context(job, intake)
            ps.set(N.GEN_AI_REQUEST_MAX_TOKENS, job.params.max_tokens)
            await self._admit(ps)
            admitted = True
            sel = self._select(intake, ps)
            rid = ID_PREFIX[ex.endpoint] + uuid.uuid4().hex[:24]
            ps.set(N.GEN_AI_RESPONSE_ID, rid)
            if isinstance(job, resp.ResponsesJob):  # a previous_response_id chain is one conversation
                ps.set(N.GEN_AI_CONVERSATION_ID, job.conversation_id or rid)
            ex.view = EngineSpanView(ps)
            req = EngineRequest(request_id=rid, prompt_token_ids=intake.token_ids, params=job.params,
                                pass_span=ex.view, arrival_ns=ex.arrival_ns)  # type: ignore[arg-type]
            ex.view.submitted = True
            if job.stream:
                await self._stream(ex, job, sel, req, route_model, send)
            else:
                await self._buffered(ex, job, sel, req, route_model, intake, send)
            ps.set(N.GEN_AI_RESPONSE_MODEL, route_model)  # the engine's summary carries its tokens
            ps.end("ok")
            self.counts[f"{ex.endpoint}:200"] += 1
        except APIError as err:
            self.counts[f"{ex.endpoint}:{err.status}"] += 1
            ps.set(sc.ERROR_TYPE, str(err.status))
            ps.end("error", err.message)
            if not ex.started:
                await _send_rendered(send, render_error(err, ex.api), ex.headers)
        except InvalidRequestError as exc:  # the engine refused the request before any work
            self.counts[f"{ex.endpoint}:400"] += 1
            ps.end("error", str(exc))
            if not ex.started:
                bad = bad_request(str(exc), exc.param)
                await _send_rendered(send, render_error(bad, ex.api), ex.headers)
        except asyncio.CancelledError:
            if ex.cut:
                await self._end_cut(ex, send)
            else:
                self.counts[f"{ex.endpoint}:cancelled"] += 1
                _end_pass(ex, "cancelled", "client disconnected")
            raise
        except Exception as exc:  # a bug or an engine failure: a 500 (or an error event), never a hang
            # The detail goes to the log and the span, never to the client (it may quote internals).
            log.exception("request %s failed", ps.trace_id)
            self.counts[f"{ex.endpoint}:500"] += 1
            _end_pass(ex, "error", f"{type(exc).__name__}: {exc}", {sc.ERROR_TYPE: type(exc).__qualname__})
            if not ex.started:
                await _send_rendered(send, render_error(internal_error(ps.trace_id), ex.api),
                                     ex.headers)
        finally:
            if admitted:
                self.admission.release(time.perf_counter() - started)

    async def _end_cut(self, ex: Exchange, send: Send) -> None:
        self.counts[f"{ex.endpoint}:shutdown"] += 1
        _end_pass(ex, "error", SHUTDOWN_MESSAGE,
                  {sc.ERROR_TYPE: "server_shutdown", N.GEN_AI_RESPONSE_FINISH_REASONS: ["error"]})
        if not ex.started:
            err = APIError(503, SHUTDOWN_MESSAGE, retry_after_s=5)
            await _send_rendered(send, render_error(err, ex.api), [*ex.headers, ("connection", "close")])

    def _parse(self, endpoint: str, body: dict[str, Any]) -> Job:
        spec = oai.speculation_config(self.cfg.speculative, self.cfg.speculative_k)  # the server's default
        if endpoint == "chat":
            return oai.parse_chat(body, self.cfg.default_max_tokens, spec)
        if endpoint == "responses":
            return resp.parse_responses(body, self.cfg.default_max_tokens, spec, self.responses)
        if endpoint == "completions":
            return oai.parse_completions(body, speculation=spec)
        return anth.parse_messages(body, spec)

    def _set_request_values(self, ps: rec.PassSpan, job: Job) -> None:
        p = job.params
        ps.set_many({
            N.GEN_AI_REQUEST_TEMPERATURE: p.temperature,
            N.GEN_AI_REQUEST_TOP_P: p.top_p,
            N.GEN_AI_REQUEST_TOP_K: p.top_k or None,
            N.GEN_AI_REQUEST_SEED: p.seed,
            N.STREAM_REQUESTED: job.stream,
            N.GEN_AI_REQUEST_FREQUENCY_PENALTY: p.frequency_penalty or None,
            N.GEN_AI_REQUEST_PRESENCE_PENALTY: p.presence_penalty or None,
            N.GEN_AI_OUTPUT_TYPE: job.output_type,
            N.API: job.api,
        })

    def _route(self, job: Job, ps: rec.PassSpan) -> str:
        t0 = rec.now_ns()
        try:
            route = self.router.route(job.requested_model)
        except APIError:
            rec.record_stage(S.ARRIVAL_MODEL_ROUTING, start_ns=t0, end_ns=rec.now_ns(), parent=ps, status="error",
                             values={N.GEN_AI_REQUEST_MODEL: job.requested_model or "",
                                     N.ROUTING_RULE: "unmatched"})
            raise
        rec.record_stage(S.ARRIVAL_MODEL_ROUTING, start_ns=t0, end_ns=rec.now_ns(), parent=ps, values={
            N.GEN_AI_REQUEST_MODEL: job.requested_model or "",
            N.GEN_AI_RESPONSE_MODEL: route.model,
            N.ROUTING_RULE: route.rule,
            N.ROUTING_FALLBACK: route.fallback,
        })
        ps.set(N.GEN_AI_RESPONSE_MODEL, route.model)
        return route.model

    def _fit_context(self, job: Job, intake: IntakeResult) -> Any:
        n, limit = len(intake.token_ids), self.max_model_len
        if n >= limit:
            raise context_exceeded(job, limit, n)
        room = limit - n
        if job.params.max_tokens > room:
            # Generation stops at the context edge anyway; say so through finish_reason "length".
            return dataclasses.replace(job.params, max_tokens=room)
        return job.params

    async def _intake(self, job: Job, ps: rec.PassSpan) -> IntakeResult:
        """Intake, after a length-only check that refuses a prompt that cannot fit before any per-character
        work; a large prompt's intake runs on a worker thread so the event loop keeps serving /health and
        the streams already running (a multi-megabyte prompt costs seconds of normalization, templating and
        tokenization)."""
        texts = self.intake.prompt_texts(job)
        floor = self.intake.token_floor(texts)
        if floor >= self.max_model_len:
            raise context_exceeded(job, self.max_model_len, floor, at_least=True)
        if sum(map(len, texts)) < OFF_LOOP_CHARS:
            return self.intake.run(job, ps, self.max_model_len)
        return await off_loop(self._workers, self.intake.run, job, ps, self.max_model_len)

    async def _admit(self, ps: rec.PassSpan) -> None:
        t0 = rec.now_ns()
        a = self.admission
        try:
            ticket = await a.acquire()
        except Shed as shed:
            rec.record_stage(S.ARRIVAL_ADMISSION, start_ns=t0, end_ns=rec.now_ns(), parent=ps, values={
                N.ADMISSION_DECISION: "shed", N.ADMISSION_QUEUE_WAIT_MS: 0.0,
                N.ADMISSION_QUEUE_DEPTH: a.queued, N.ADMISSION_RUNNING: a.running,
                N.ADMISSION_MAX_RUNNING: a.max_running})
            raise APIError(429, str(shed), code="rate_limit_exceeded", retry_after_s=shed.retry_after_s) from None
        except asyncio.CancelledError:
            rec.record_stage(S.ARRIVAL_ADMISSION, start_ns=t0, end_ns=rec.now_ns(), parent=ps, status="cancelled",
                             values={N.ADMISSION_DECISION: "queued",
                                     N.ADMISSION_QUEUE_WAIT_MS: (rec.now_ns() - t0) / 1e6})
            raise
        rec.record_stage(S.ARRIVAL_ADMISSION, start_ns=t0, end_ns=rec.now_ns(), parent=ps, values={
            N.ADMISSION_DECISION: ticket.decision,
            N.ADMISSION_QUEUE_WAIT_MS: round(ticket.queue_wait_ms, 3),
            N.ADMISSION_QUEUE_DEPTH: ticket.queue_depth,
            N.ADMISSION_RUNNING: ticket.running,
            N.ADMISSION_MAX_RUNNING: ticket.max_running,
        })
        ps.set(N.ADMISSION_QUEUE_WAIT_MS, round(ticket.queue_wait_ms, 3))

    def _select(self, intake: IntakeResult, ps: rec.PassSpan) -> Selection:
        t0 = rec.now_ns()
        sel = self.replicas.select(intake.token_ids)
        rec.record_stage(S.ARRIVAL_REPLICA_SELECTION, start_ns=t0, end_ns=rec.now_ns(), parent=ps, values={
            N.REPLICA_ID: sel.replica.id,
            N.REPLICA_POLICY: sel.policy,
            N.REPLICA_CANDIDATES: sel.candidates,
            N.REPLICA_EXPECTED_HIT_TOKENS: sel.expected_hit_tokens,
        })
        ps.set(N.REPLICA_ID, sel.replica.id)
        ps.set(N.ENGINE_BOOT_ID, sel.replica.boot_id)
        return sel

    # ───────────────────────────────────────────────────────────── responses
    async def _stream(self, ex: Exchange, job: Job, sel: Selection, req: EngineRequest, model: str,
                      send: Send) -> Outcome:
        t0 = rec.now_ns()
        stream_cls: Any = (anth.AnthropicStream if job.api == "anthropic" else
                           resp.ResponsesStream if job.endpoint == "responses" else oai.OpenAIStream)
        writer: Any = stream_cls(req.request_id, model, job)
        headers = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"),
                   ("x-accel-buffering", "no"), *ex.headers]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in headers]})
        ex.started = True
        first_byte = rec.now_ns()
        # The stream is open once its headers are out; its first event waits for the first token (below).
        rec.record_stage(S.ARRIVAL_STREAM_SETUP, start_ns=t0, end_ns=first_byte, parent=ex.pass_span, values={
            N.STREAM_REQUESTED: True, N.STREAM_PROTOCOL: "sse",
            N.STREAM_FIRST_BYTE_MS: round((first_byte - ex.arrival_ns) / 1e6, 3)})
        gate = ToolGate(job.output_type == "tool_calls")
        got = Collected(ex.outputs, sel.replica.tokenizer if job.logprobs else None)
        got.clock.threads = ex.threads
        opening = _Opening(writer)
        try:
            async with aclosing(generate(sel, req, got)) as outputs:
                async for out in outputs:
                    # The opening event (OpenAI's role chunk, the echoed prompt, Responses' response.created) goes
                    # with the first engine output, i.e. after prefill, as OpenAI and vLLM send it: OpenInference,
                    # OpenLLMetry and LiteLLM stamp "first token" at the first chunk the SDK yields, and an opening
                    # sent before prefill made their TTFT the time to the headers.
                    chunks: list[bytes] = opening.take()
                    if job.api == "anthropic":
                        chunks += writer.start(out.num_prompt_tokens, out.num_cached_tokens)
                    piece = gate.feed(out.text_delta)
                    # a held-back piece of text (stop-string or tool-call look-ahead) keeps its tokens'
                    # log-probabilities for the chunk that finally carries it
                    chunks += writer.text(piece, got.unsent_logprobs() if piece else None)
                    await _send_chunks(send, chunks)
        except asyncio.CancelledError:
            if ex.cut:  # the server is shutting down: say so in the stream's own terms, then close it
                await _send_chunks(send, opening.take() + writer.error(SHUTDOWN_MESSAGE))
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            raise
        except Exception:
            log.exception("generation failed mid-stream (trace %s)", ex.pass_span.trace_id)
            await _send_chunks(send, opening.take() + writer.error(internal_error(ex.pass_span.trace_id).message))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            raise
        outcome = got.outcome(req.params.stop)
        closing = opening.take() + ([] if outcome.tool_calls else writer.text(gate.release(), got.unsent_logprobs()))
        closing += writer.closing(outcome)
        await _send_chunks(send, closing)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._record_output(ex, outcome, got.clock)
        return outcome

    async def _buffered(self, ex: Exchange, job: Job, sel: Selection, req: EngineRequest, model: str,
                        intake: IntakeResult, send: Send) -> Outcome:
        got = Collected(ex.outputs, sel.replica.tokenizer if job.logprobs else None)
        got.clock.threads = ex.threads
        async with aclosing(generate(sel, req, got)) as outputs:
            async for _ in outputs:
                pass
        outcome = got.outcome(req.params.stop)
        t0 = rec.now_ns()
        created = int(time.time())
        if job.api == "anthropic":
            payload = anth.message_response(req.request_id, model, outcome)
        elif isinstance(job, resp.ResponsesJob):
            payload = resp.response_object(req.request_id, model, outcome, job, created)
        elif job.endpoint == "chat":
            payload = oai.chat_response(req.request_id, model, outcome, created)
        else:
            payload = oai.completion_response(req.request_id, model, outcome, created, intake.prefix_text)
        ex.started = True
        await send_json(send, 200, payload, ex.headers)
        rec.record_stage(S.ARRIVAL_STREAM_SETUP, start_ns=t0, end_ns=rec.now_ns(), parent=ex.pass_span, values={
            N.STREAM_REQUESTED: False, N.STREAM_PROTOCOL: "none",
            N.STREAM_FIRST_BYTE_MS: round((t0 - ex.arrival_ns) / 1e6, 3)})
        self._record_output(ex, outcome, got.clock)
        return outcome

    @staticmethod
    def _record_output(ex: Exchange, o: Outcome, clock: TokenClock) -> None:
        ps, arrival_ns = ex.pass_span, ex.arrival_ns
        if capture.mode() == "none":
            text = ""
        else:
            text = o.text if not o.tool_calls else json.dumps(o.tool_calls)
            ps.set(N.OUTPUT_HASH, capture.hash_text(text))
        kept = capture.keep_text(text) if text else None
        if kept is not None:
            ps.set(N.OUTPUT_TEXT, kept)
        if clock.first_ns is not None:
            ttft_ns = clock.first_ns - arrival_ns
            ps.set(N.TTFT_MS, round(ttft_ns / 1e6, 3))
            if ex.waited0 is not None and clock.first_waited is not None:
                # two of the threads waiting at once both count: never more than the TTFT itself
                waited = min(max(clock.first_waited - ex.waited0, 0), max(ttft_ns, 0))
                ps.set(N.TTFT_CPU_WAIT_MS, round(waited / 1e6, 3))
            if o.output_tokens > 1 and clock.last_ns is not None:
                ps.set(N.TPOT_MS, round((clock.last_ns - clock.first_ns) / 1e6 / (o.output_tokens - 1), 3))

def _end_pass(ex: Exchange, status: rec.SpanStatus, message: str, values: dict[str, object] | None = None) -> None:
    """End a pass the server gave up on: after the engine's last write to it when the engine has the request
    (see ``EngineSpanView``), at once otherwise."""
    if ex.view is not None:
        ex.view.end_after_engine(status, message, values)
    else:
        ex.pass_span.set_many(values or {})
        ex.pass_span.end(status, message)


class _Opening:
    """A stream's opening events, sent once: with the first engine output, or before an error or the closing
    events when none came (a stream always starts the way its protocol starts: role chunk, response.created)."""

    __slots__ = ("writer", "sent")

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.sent = False

    def take(self) -> list[bytes]:
        if self.sent:
            return []
        self.sent = True
        return list(self.writer.opening())


async def _send_chunks(send: Send, chunks: list[bytes]) -> None:
    if chunks:
        await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})


async def _send_rendered(send: Send, rendered: Any, headers: list[tuple[str, str]]) -> None:
    from llmtrace.backend.server.asgi_io import send_bytes

    await send_bytes(send, rendered.status, rendered.body, [*rendered.headers, *headers])
