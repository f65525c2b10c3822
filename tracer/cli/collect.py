"""``llmtrace collect``: receive OTLP/HTTP spans from other processes into the store.

    llmtrace collect --db traces.duckdb --port 4318 [--token SECRET] [--max-size 10GB] [--max-age 30d]

Point any OpenTelemetry SDK at it (``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318``, protocol
http/protobuf or http/json). SIGTERM or Ctrl-C stops it after everything accepted is written.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from llmtrace.tracer.collect.conns import Timeouts
from llmtrace.tracer.collect.server import Collector, CollectorConfig
from llmtrace.tracer.settings import env, resolve_db
from llmtrace.tracer.storage.retention import RetentionPolicy, parse_age, parse_size
from llmtrace.tracer.storage.store import StoreError, check_existing_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="store file (default $LLMTRACE_DB or ./llmtrace.duckdb)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=4318, help="port (default 4318, the OTLP/HTTP port; 0 picks one)")
    parser.add_argument("--token", default=None,
                        help="require 'Authorization: Bearer TOKEN' on exports and /stats (visible in ps: prefer "
                             "$LLMTRACE_COLLECT_TOKEN or --token-file)")
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help="read the bearer token from this file (its first line)")
    parser.add_argument("--max-size", default=None, help="drop the oldest traces past this size, e.g. 10GB")
    parser.add_argument("--max-age", default=None, help="drop traces older than this, e.g. 30d or 12h")
    parser.add_argument("--retention-every", type=float, default=60.0, metavar="SECONDS",
                        help="how often retention runs (default 60)")
    parser.add_argument("--capture", choices=("none", "hashes", "full"), default=None,
                        help="what to keep of prompt/output text in other instrumentations' spans "
                             "(default $LLMTRACE_CAPTURE or hashes)")
    parser.add_argument("--max-body", default="32MB", help="largest request body accepted (default 32MB)")
    parser.add_argument("--queue", default="256MB", help="memory for accepted, not yet written spans (default 256MB)")
    parser.add_argument("--flush-interval", type=float, default=0.2, metavar="SECONDS",
                        help="pause between write transactions, leaving the store free for readers (default 0.2)")
    parser.add_argument("--max-connections", type=int, default=128, help="connections served at once (default 128)")
    parser.add_argument("--max-connections-per-client", type=int, default=64, metavar="N",
                        help="connections one client address may hold (default 64)")
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="time for a request's headers to arrive (default 10)")
    parser.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="time for a request's body to arrive (default 60; below 16 KB/s it is cut sooner)")
    parser.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long an idle keep-alive connection is kept (default 60)")
    parser.add_argument("--no-wal", action="store_true",
                        help="answer 200 before spans are durable (no write-ahead log): a crash then loses "
                             "acknowledged spans; for throw-away stores only")
    parser.add_argument("--quiet", action="store_true", help="print only errors")


def resolve_token(args: argparse.Namespace) -> str | None:
    """The token from --token, --token-file or $LLMTRACE_COLLECT_TOKEN (in that order; not two flags)."""
    if args.token is not None and args.token_file is not None:
        raise ValueError("give --token or --token-file, not both")
    if args.token is not None:
        print("llmtrace collect: warning: --token is visible to every user of this machine (ps, /proc); "
              "use LLMTRACE_COLLECT_TOKEN or --token-file", file=sys.stderr, flush=True)
        token = args.token.strip()
    elif args.token_file is not None:
        path = Path(args.token_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --token-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
        token = (text.strip().splitlines() or [""])[0].strip()
        if not token:
            raise ValueError(f"--token-file {path} is empty")
        if path.stat().st_mode & 0o077:
            print(f"llmtrace collect: warning: {path} is readable by other users (chmod 600 it)", file=sys.stderr,
                  flush=True)
    else:
        token = env("LLMTRACE_COLLECT_TOKEN") or ""
    if token and any(ord(ch) < 33 or ord(ch) > 126 for ch in token):
        raise ValueError("the token must be printable ASCII without spaces (it is sent in an HTTP header)")
    return token or None


def config_from_args(args: argparse.Namespace) -> CollectorConfig:
    token = resolve_token(args)
    policy = RetentionPolicy(
        max_bytes=parse_size(args.max_size) if args.max_size else None,
        max_age_s=parse_age(args.max_age) if args.max_age else None,
    )
    capture = args.capture or env("LLMTRACE_CAPTURE") or "hashes"
    max_body = parse_size(args.max_body)
    return CollectorConfig(
        db=resolve_db(args.db), host=args.host, port=args.port, token=token,
        max_body_bytes=max_body, max_decoded_bytes=max(4 * max_body, 64 << 20),
        max_queue_bytes=parse_size(args.queue), flush_interval_s=args.flush_interval,
        capture=capture, retention=policy, retention_interval_s=args.retention_every, wal=not args.no_wal,
        max_connections=args.max_connections, max_connections_per_client=args.max_connections_per_client,
        timeouts=Timeouts(header_s=args.header_timeout, idle_s=args.idle_timeout, body_s=args.body_timeout),
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.INFO, format="%(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"llmtrace collect: {exc}", file=sys.stderr)
        return 2
    try:
        check_existing_store(config.db)
    except StoreError as exc:
        print(f"llmtrace collect: {exc}", file=sys.stderr)
        return 1
    collector = Collector(config)
    try:
        collector.start()
    except StoreError as exc:
        print(f"llmtrace collect: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"llmtrace collect: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if not config.token and config.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"llmtrace collect: warning: listening on {config.host} without --token; anyone who can reach "
              "the port can write spans", file=sys.stderr, flush=True)
    written, skipped = collector.replayed
    if written or skipped:
        print(f"llmtrace collect: replayed {written} spans from the write-ahead log of a collector that did not "
              f"stop cleanly ({skipped} were already stored)", flush=True)
    auth = " (bearer token required)" if config.token else ""
    print(f"llmtrace collect: listening on http://{config.host}:{collector.port}/v1/traces{auth}, "
          f"writing to {config.db}", flush=True)
    while not stop.wait(0.5):
        pass
    stats = collector.stats()
    lost = collector.stop()
    rows = collector.stats()["rows_written"]
    if not args.quiet:
        print(f"llmtrace collect: stopped; {stats['spans_accepted']} spans accepted, {rows} rows written"
              f"{f', {lost} NOT written (store unusable: {collector.writer.last_error})' if lost else ''}"
              f"{'; they stay in the write-ahead log and the next start on this store writes them' if lost and collector.wal else ''}",
              flush=True)
    return 1 if lost else 0
