"""Run the server inside the current process, on a background thread (for the demo, notebooks and tests
that want one process and one tracer). The caller owns tracing: call ``llmtrace.init`` first if the
server's spans should be stored; they then share the caller's store and service name.

    from llmtrace.backend.server.background import start_background
    srv = start_background(model="tiny", replicas=2)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused")
    ...
    srv.stop()
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass
from typing import Any

from llmtrace.backend.server.cli import add_arguments, build_service


@dataclass
class BackgroundServer:
    base_url: str
    port: int
    service: Any
    _server: Any
    _thread: threading.Thread

    def stop(self, timeout_s: float = 30.0) -> None:
        """Drain (running requests finish, new ones get 503), then stop the HTTP server and the engines."""
        self.service.draining = True
        deadline = time.monotonic() + timeout_s
        while self.service.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self._server.should_exit = True
        self._thread.join(timeout_s)
        for replica in self.service.replicas:
            replica.shutdown()


def start_background(model: str | None = "tiny", *, host: str = "127.0.0.1", port: int = 0,
                     timeout_s: float = 120.0, **options: Any) -> BackgroundServer:
    """Start serving; ``options`` are the ``llmtrace serve`` flags with underscores (``replicas=2``,
    ``routing="round_robin"``, ``alias=["gpt-4o-mini=tiny"]``, ``strip_invisible=True``, ...)."""
    import uvicorn

    from llmtrace.backend.server.app import build_app

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    args.model, args.host, args.port = model, host, port
    for key, value in options.items():
        if not hasattr(args, key):
            raise ValueError(f"unknown server option {key!r}")
        setattr(args, key, value)
    service = build_service(args)
    config = uvicorn.Config(build_app(service), host=host, port=port, log_level="warning", lifespan="off",
                            timeout_keep_alive=30, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="llmtrace-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            for replica in service.replicas:
                replica.shutdown()
            raise RuntimeError(f"the background server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = port
    for srv in server.servers:
        for sock in srv.sockets:
            bound = sock.getsockname()[1]
    return BackgroundServer(f"http://{host}:{bound}", bound, service, server, thread)
