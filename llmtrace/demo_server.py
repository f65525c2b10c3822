"""The bundled backend served from inside this process (uvicorn in a thread), for ``llmtrace demo`` and
tests that need the app's spans and the server's in one store: both record through the same
``llmtrace.init`` set-up, so one trace holds the client pass and the server pass under it.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from typing import Any


class InProcessServer:
    """``llmtrace serve`` in a background thread on a free loopback port.

        with InProcessServer(model="tiny") as srv:
            client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused")
    """

    def __init__(self, model: str | None = None, *extra: str) -> None:
        from llmtrace.backend.server import cli as serve_cli

        parser = argparse.ArgumentParser()
        serve_cli.add_arguments(parser)
        argv = ["--port", "0", *extra] + (["--model", model] if model else [])
        self.args = parser.parse_args(argv)
        self._serve_cli = serve_cli
        self.service: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.load_s = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model_id(self) -> str:
        return str(self.service.router.default)

    def start(self, timeout_s: float = 120.0) -> InProcessServer:
        import uvicorn

        from llmtrace.backend.server.app import build_app

        t0 = time.perf_counter()
        self.service = self._serve_cli.build_service(self.args)
        self.load_s = time.perf_counter() - t0
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(build_app(self.service), log_level="warning", lifespan="off",
                                timeout_keep_alive=30, access_log=False)
        server = uvicorn.Server(config)  # off the main thread it installs no signal handlers
        self._server = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="llmtrace-serve",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the in-process server stopped while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the in-process server did not start in {timeout_s:.0f}s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self.service is not None:
            for replica in self.service.replicas:
                try:
                    replica.shutdown()
                except Exception:  # stopping anyway
                    pass
        self._server = self._thread = None

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
