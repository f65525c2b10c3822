"""Default-mode hashes are keyed with a per-store secret (issue 14 item 12): a short secret cannot be found by
brute force over the stored hash without the key; equal text still matches within a store and across a
fleet sharing ``LLMTRACE_HASH_KEY``; the key lives beside the store (0600), never in a span."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

import llmtrace
from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec

SECRET = "Your verification code is 482913"

# A real app process: hashes the secret the way the adapters do and stores it on a pass span.
APP = textwrap.dedent("""
    import sys
    import llmtrace
    from llmtrace.tracer import capture, recording as rec
    llmtrace.init(db=sys.argv[1])
    with rec.start_pass("m", side="client") as p:
        p.set("llmtrace.prompt.hash", capture.hash_text(sys.argv[2]))
""")


def stored_hashes(db: Path) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [r[0] for r in con.execute(
            "SELECT json_extract_string(attributes, '$.\"llmtrace.prompt.hash\"') FROM spans ORDER BY start_ns")
            .fetchall()]
    finally:
        con.close()


def start_app(db: Path, text: str = SECRET, env_key: str | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "LLMTRACE_HASH_KEY"}
    # What is checked here is the stored hash, not how fast exit is (test_exporter_shutdown.py bounds that):
    # four of these apps start at once on a busy 2-core machine, so each gets a minute to store its span.
    env["LLMTRACE_SHUTDOWN_TIMEOUT_S"] = "60"
    if env_key is not None:
        env["LLMTRACE_HASH_KEY"] = env_key
    return subprocess.Popen([sys.executable, "-c", APP, str(db), text], env=env)


def finish(proc: subprocess.Popen[bytes]) -> None:
    assert proc.wait(timeout=60) == 0, proc.args


def run_app(db: Path, text: str = SECRET, env_key: str | None = None) -> None:
    finish(start_app(db, text, env_key))


def unkeyed(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def test_a_short_secret_is_not_found_by_brute_force_without_the_key(tmp_path: Path) -> None:
    db = tmp_path / "app.duckdb"
    run_app(db)
    (stored,) = stored_hashes(db)
    # The attack of the report: every 6-digit code, unkeyed 64-bit BLAKE2b, compared with the stored hash.
    prefix = "Your verification code is "
    assert not any(unkeyed(f"{prefix}{code:06d}") == stored for code in range(1_000_000))
    key_file = tmp_path / "app.duckdb.key"
    assert key_file.exists() and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = bytes.fromhex(key_file.read_text().strip())
    assert len(key) == 32
    # With another key the search finds nothing either; with the store's key the same text gives the hash.
    other = bytes(32)
    assert hashlib.blake2b(SECRET.encode(), key=other, digest_size=8).hexdigest() != stored
    assert hashlib.blake2b(SECRET.encode(), key=key, digest_size=8).hexdigest() == stored
    # The key is in no span (nor the resource or events).
    con = duckdb.connect(str(db), read_only=True)
    try:
        dump = json.dumps(con.execute("SELECT * FROM spans").fetchall(), default=str)
    finally:
        con.close()
    assert key.hex() not in dump and key_file.read_text().strip() not in dump


def test_equal_text_matches_within_a_store_and_across_a_fleet_sharing_the_key(tmp_path: Path) -> None:
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    # A fleet: two stores, one shared key, equal hashes; and no key file is written for it.
    fleet_key = "a fleet-wide secret"
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    # the stores other than `one` share nothing with it or each other: their apps run while `one`'s three
    # run one after the other (those must: the second and third read the key file the first wrote)
    others = [start_app(two), start_app(a, env_key=fleet_key), start_app(b, env_key=fleet_key)]
    run_app(one)
    run_app(one)  # a second process on the same store reads the same key file
    run_app(one, "Your verification code is 482914")
    for proc in others:
        finish(proc)
    first, again, different = stored_hashes(one)
    assert first == again and first != different
    assert stored_hashes(two)[0] != first  # another store: another key
    assert stored_hashes(a) == stored_hashes(b) and stored_hashes(a)[0] != first
    assert not (tmp_path / "a.duckdb.key").exists() and not (tmp_path / "b.duckdb.key").exists()


def test_init_keys_the_chunk_chains_too_and_they_still_locate_the_divergence(store_path: Path) -> None:
    llmtrace.init(db=store_path)
    chain = capture.chunk_hash_chain("x" * 200 + SECRET, chunk_chars=64)
    plain = []
    parent = b""
    text = "x" * 200 + SECRET
    for start in range(0, len(text), 64):
        h = hashlib.blake2b(parent + text[start : start + 64].encode(), digest_size=8)
        parent = h.digest()
        plain.append(h.hexdigest())
    assert capture.first_divergence(chain, plain) == 0  # no link equals its unkeyed hash
    other = capture.chunk_hash_chain("x" * 200 + "Your verification code is 000000", chunk_chars=64)
    assert capture.first_divergence(chain, other) == 3
    with rec.start_pass("m"):
        pass
    llmtrace.shutdown()
    assert Path(f"{store_path}.key").exists()


def test_the_keyed_hasher_for_token_blocks_uses_the_store_key(store_path: Path) -> None:
    llmtrace.init(db=store_path)
    key = bytes.fromhex(Path(f"{store_path}.key").read_text().strip())
    h = capture.hasher()
    h.update(b"\x01\x02")
    assert h.hexdigest() == hashlib.blake2b(b"\x01\x02", key=key, digest_size=8).hexdigest()
    assert h.hexdigest() != hashlib.blake2b(b"\x01\x02", digest_size=8).hexdigest()
    llmtrace.shutdown()
