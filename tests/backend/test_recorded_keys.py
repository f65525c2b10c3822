"""Block keys leave the engine keyed with the store's secret: a recorded chain cannot be matched against
block hashes anyone can compute from guessed token ids, yet equal prefixes still record equal keys."""

from __future__ import annotations

import subprocess
import sys

from llmtrace.backend.engine.prefix_cache import block_hashes_hex, chain_hashes


def test_recorded_chain_is_keyed_but_still_matches_equal_prefixes() -> None:
    tokens = list(range(1000, 1064))  # four full blocks of a guessable prompt
    plain = [f"{h:016x}" for h in chain_hashes(tokens, 16)]
    recorded = block_hashes_hex(tokens, 16)
    assert len(recorded) == 4 and not set(recorded) & set(plain)
    assert block_hashes_hex(tokens + [7] * 16, 16)[:4] == recorded  # same prefix, same recorded keys
    assert block_hashes_hex([5] + tokens[1:], 16)[0] != recorded[0]


def test_another_key_records_other_keys() -> None:
    code = ("from llmtrace.backend.engine.prefix_cache import block_hashes_hex; "
            "print(block_hashes_hex(list(range(1000, 1016)), 16)[0])")
    # both processes at once: each spends seconds importing the backend, and they do not depend on each other
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={"LLMTRACE_HASH_KEY": key, "PATH": ""}) for key in ("a" * 64, "b" * 64)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        runs.append(out.strip())
    assert runs[0] != runs[1] and all(len(r) == 16 for r in runs)
