"""``llmtrace serve``: the bundled backend as an OpenAI- and Anthropic-compatible HTTP server.

    llmtrace serve                         # the default model on http://127.0.0.1:8000
    llmtrace serve --model tiny --replicas 2 --routing round_robin --port 0

SIGTERM or Ctrl-C drains: requests already running finish (streams included), new ones get 503; whatever
still runs after --drain-s ends with an error (an SSE error event on a stream) recorded as a server
shutdown; then
the traces are flushed to the store and the process exits 0. A second signal stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from llmtrace.backend.server.arguments import add_arguments  # noqa: F401  (the command's parser, kept light)
from llmtrace.backend.server.config import ServerConfig

log = logging.getLogger("llmtrace.serve")


def _aliases(items: list[str], served: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, target = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"llmtrace serve: --alias wants NAME=MODEL, got {item!r}")
        out[name] = target or served
    return out


def _model_arg(model: str | None) -> tuple[str, str]:
    """(what the engine loads, the served model id's default)."""
    if model == "tiny":
        return "tiny", "tiny"
    if model is None:
        from llmtrace.backend.model.pull import default_model_path

        path = default_model_path()
        if not path.exists():
            raise SystemExit(f"llmtrace serve: the default model is not at {path}; run `llmtrace model pull` "
                             "first, or pass --model PATH (or --model tiny)")
    else:
        path = Path(model).expanduser()
        if not path.is_file():
            raise SystemExit(f"llmtrace serve: no model file at {path}")
    stem = path.name.removesuffix(".gguf")
    return str(path), stem.split(".")[0] if "." in stem else stem


def build_service(args: argparse.Namespace, first_steps_here: bool = False) -> Any:
    """Load the replicas and wire the server's parts (also used by the benchmark). With ``first_steps_here``
    the calling thread must step the first replica (``Replica.run_engine``)."""
    from llmtrace.backend.engine.config import EngineConfig
    from llmtrace.backend.generation.detokenizer import set_default_hold_back
    from llmtrace.backend.generation.stop_strings import set_default_max_hold
    from llmtrace.backend.server.admission import Admission
    from llmtrace.backend.server.intake import Intake
    from llmtrace.backend.server.normalization import NormalizationPolicy
    from llmtrace.backend.server.replica import Replica
    from llmtrace.backend.server.replica_set import ReplicaSet
    from llmtrace.backend.server.routing import ModelRouter
    from llmtrace.backend.server.service import GenerationService

    set_default_hold_back(getattr(args, "detokenizer_holdback", "utf8") != "off")
    try:
        set_default_max_hold(getattr(args, "stop_holdback", None))
    except ValueError as exc:
        raise SystemExit(f"llmtrace serve: --stop-holdback: {exc}") from None
    _moderation(args)
    model, served_default = _model_arg(args.model)
    served = args.served_model_name or served_default
    engine_kwargs: dict[str, Any] = {"batch_invariant": args.batch_invariant, "dtype": args.dtype,
                                     "decode": args.decode}
    if args.num_blocks:
        engine_kwargs["num_blocks"] = args.num_blocks
    if args.max_num_seqs:
        engine_kwargs["max_num_seqs"] = args.max_num_seqs
    engine_config = EngineConfig(**engine_kwargs)
    cfg = ServerConfig(
        host=args.host, port=args.port, replicas=args.replicas, routing=args.routing,
        max_running=args.max_running or engine_config.max_num_seqs * args.replicas,
        max_queued=args.max_queued, normalize=args.normalize, strip_invisible=args.strip_invisible,
        aliases=_aliases(args.alias, served), served_model_name=served,
        default_max_tokens=args.default_max_tokens, drain_timeout_s=args.drain_s,
        speculative=args.speculative, speculative_k=args.speculative_k,
    )
    template = None
    if args.chat_template:
        try:
            template = Path(args.chat_template).read_text(encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"llmtrace serve: cannot read --chat-template: {exc}") from None
    replicas = Replica.load_all(cfg.replicas, model, engine_config, first_steps_here)
    router = ModelRouter([served], cfg.aliases)
    intake = Intake(replicas[0].tokenizer, NormalizationPolicy(cfg.normalize, cfg.strip_invisible),
                    block_size=replicas[0].block_size, template_override=template)
    return GenerationService(cfg, router, ReplicaSet(replicas, cfg.routing), intake,
                             Admission(cfg.max_running, cfg.max_queued), _limits(args))


def _moderation(args: argparse.Namespace) -> None:
    from llmtrace.backend.generation import moderation

    spec = getattr(args, "moderation_words", None)
    try:
        policy = (moderation.ModerationPolicy(moderation.parse_words(spec), getattr(args, "moderation_every_tokens", 8))
                  if spec else None)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"llmtrace serve: --moderation-words: {exc}") from None
    moderation.configure(policy)


def _limits(args: argparse.Namespace) -> Any:
    from llmtrace.backend.server.http_guard import ConnectionLimits

    return ConnectionLimits(header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                            limit_concurrency=args.limit_concurrency)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from llmtrace import tracer
    from llmtrace.backend.server.app import build_app
    from llmtrace.backend.server.auth import ApiKeyGuard
    from llmtrace.backend.server.http_guard import guarded_protocol

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The event loop shares the GIL with the engine thread and the intake worker; at the default 5 ms switch
    # interval every handoff can cost the loop 5 ms, and one /health answer needs dozens of them.
    sys.setswitchinterval(0.001)
    api_key = _api_key(args)
    tracer.init(db=args.db, service_name="llmtrace-serve", deploy=args.deploy, capture=args.capture,
                otlp_endpoint=args.otlp_endpoint)
    service = None
    try:
        t0 = time.perf_counter()
        try:
            service = build_service(args, first_steps_here=True)
        except ValueError as exc:
            print(f"llmtrace serve: {exc}", file=sys.stderr)
            return 2
        load_s = time.perf_counter() - t0
        # Everything alive now (the model, torch, the tokenizer) lives as long as the server: out of every
        # later collection, which then only walks what requests allocate, and out of the interpreter's last
        # collection at exit, which took seconds after the traces were flushed
        gc.freeze()
        app: Any = build_app(service)
        if api_key:
            app = ApiKeyGuard(app, api_key)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                lifespan="off", timeout_keep_alive=30, timeout_graceful_shutdown=5,
                                access_log=args.log_level in ("debug", "info"),
                                http=guarded_protocol(service.limits),
                                limit_concurrency=service.limits.limit_concurrency)
        server = DrainingServer(config, service, load_s)
        # The main thread loaded the model, so it steps the first replica (torch is slowest on a second
        # thread; see AsyncEngine); HTTP is served from a thread of its own. uvicorn only installs signal
        # handlers on the main thread, so they are installed here and forwarded to it.
        primary = service.replicas.replicas[0]
        http = threading.Thread(target=_serve_then_stop, args=(server, primary), name="llmtrace-http")
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, server.handle_exit)
        http.start()
        primary.run_engine()
        http.join()
        return 0 if server.started else 1
    finally:
        if service is not None:
            for replica in service.replicas:
                try:
                    replica.shutdown()
                except Exception:  # shutting down anyway; the traces still get flushed below
                    log.exception("replica shutdown failed")
        from llmtrace.backend.server.engine_span import EngineSpanView

        EngineSpanView.end_all_waiting()  # passes cut at shutdown whose engine never wrote again
        tracer.shutdown()


def _api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else LLMTRACE_API_KEY (which keeps the key out of ``ps``), else none: then a warning when
    the address is reachable from other machines."""
    import os

    from llmtrace.backend.server.auth import KEY_ENV, is_loopback

    key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV)
    if not key and not is_loopback(args.host):
        print(f"llmtrace serve: warning: listening on {args.host}, which other machines can reach, with no API "
              f"key: anyone who reaches the port can use the model. Pass --api-key or set {KEY_ENV}.",
              file=sys.stderr, flush=True)
    return key or None


def _serve_then_stop(server: Any, primary: Any) -> None:
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind; it has already said why
        pass
    except BaseException:
        log.exception("the HTTP server failed")
    finally:
        primary.shutdown()  # ends run_engine() on the main thread


def _uvicorn_server() -> type:
    import uvicorn

    return uvicorn.Server


class DrainingServer(_uvicorn_server()):  # type: ignore[misc]
    """uvicorn, but the first SIGTERM/SIGINT drains: new requests get 503 while running ones finish."""

    def __init__(self, config: Any, service: Any, load_s: float) -> None:
        super().__init__(config)
        self.service = service
        self.load_s = load_s
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self._loop = asyncio.get_running_loop()
        if self.should_exit:
            return
        port = self.config.port
        for srv in getattr(self, "servers", []):
            for sock in srv.sockets:
                port = sock.getsockname()[1]
        svc = self.service
        aliases = "".join(f", alias {a} -> {t}" for a, t in svc.router.aliases.items())
        print(f"llmtrace serve: listening on http://{self.config.host}:{port} (model {svc.router.default}{aliases}; "
              f"{len(svc.replicas)} replica(s), {svc.replicas.policy} routing; loaded in {self.load_s:.1f}s; "
              f"compute {_compute_path(svc)})", flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in _captured_signals: uvicorn would re-raise it after serving and kill the process
        # before the traces are flushed.
        if self.service.draining or self._loop is None:
            self.should_exit = True
            self.force_exit = self.service.draining
            return
        self.service.draining = True
        print("llmtrace serve: draining (running requests finish, new ones get 503)", flush=True)
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain()))

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.service.cfg.drain_timeout_s
        while self.service.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.service.cut_all():
            # Each cut request sends its error and ends its span; give them a moment to go out before uvicorn
            # closes the connections.
            cut_deadline = time.monotonic() + 2.0
            while self.service.in_flight > 0 and time.monotonic() < cut_deadline:
                await asyncio.sleep(0.02)
        self.should_exit = True


def _compute_path(svc: Any) -> str:
    """The first replica's compute path (all share one model): each phase's arithmetic and the CPU kind."""
    for replica in svc.replicas:
        return str(replica.engine.compute_path_summary())
    return "unknown"
