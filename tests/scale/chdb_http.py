"""A loopback HTTP endpoint backed by chdb that speaks enough of ClickHouse's HTTP interface for clickhouse-connect.

Not a ClickHouse server (none installable here: Debian's is 18.16): ClickHouse's engine in-process (chdb) behind
the HTTP protocol clickhouse-connect speaks (the query in the body or ``?query=``, settings and ``database``
as URL parameters, the format from the query's ``FORMAT`` clause, errors as ``Code: N. DB::Exception``
with a 500). It lets ``--store clickhouse://127.0.0.1:PORT/DB`` run end to end through the real client, so
the HTTP sender is tested with the SQL the chdb sender runs. One chdb session serves it, one request at a
time (a test's one client).
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# URL parameters that are the protocol's, not settings to apply
_PROTOCOL = {"query", "database", "session_id", "session_timeout", "session_check", "query_id", "default_format",
             "compress", "decompress", "user", "password", "quota_key", "wait_end_of_query", "buffer_size",
             "send_progress_in_http_headers", "http_headers_progress_interval_ms", "enable_http_compression",
             "http_zlib_compression_level", "client_protocol_version"}
_FORMAT = re.compile(r"\s+FORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)


class ChdbHTTP:
    """``with ChdbHTTP(path) as port:`` serves the chdb data at ``path`` on 127.0.0.1:port."""

    def __init__(self, path: str) -> None:
        from chdb import session

        self.sess = session.Session(path)
        self.lock = threading.Lock()
        self.queries: list[str] = []  # every statement it ran, as received (the test compares them)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> int:
        self.thread.start()
        return int(self.server.server_address[1])

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.sess.close()

    def run(self, sql: str, params: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        m = _FORMAT.search(sql)
        fmt = m.group(1) if m else params.get("default_format", "TabSeparated")
        body = sql[: m.start()] if m else sql
        with self.lock:
            try:
                if params.get("database"):
                    self.sess.query(f"USE {params['database']}")
                for k, v in params.items():
                    if k not in _PROTOCOL and re.fullmatch(r"\w+", k) and re.fullmatch(r"[\w.\-]*", v):
                        self.sess.query(f"SET {k} = '{v}'" if not v.lstrip("-").isdigit() else f"SET {k} = {v}")
                if body.strip():
                    self.queries.append(body.strip())
                out = self.sess.query(body, fmt) if body.strip() else None
            except Exception as exc:  # noqa: BLE001 - ClickHouse's HTTP answer for a refused statement
                text = str(exc).strip() or type(exc).__name__
                code = re.search(r"Code: (\d+)", text)
                return 500, text.encode(), {"X-ClickHouse-Exception-Code": code.group(1) if code else "1"}
        data = out.bytes() if out is not None and hasattr(out, "bytes") else (bytes(out) if out is not None else b"")
        return 200, data, {"X-ClickHouse-Format": fmt, "X-ClickHouse-Timezone": "UTC",
                           "X-ClickHouse-Summary": '{"read_rows":"0","read_bytes":"0","written_rows":"0",'
                                                   '"written_bytes":"0","total_rows_to_read":"0"}'}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def _serve(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode() if n else ""
                sql = (params.get("query", "") + ("\n" if params.get("query") and body else "") + body)
                if url.path in ("/ping", "/"):
                    status, data, headers = (200, b"Ok.\n", {}) if not sql.strip() else outer.run(sql, params)
                else:
                    status, data, headers = outer.run(sql, params)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve
            do_POST = _serve

        return Handler
