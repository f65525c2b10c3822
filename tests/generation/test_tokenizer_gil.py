"""A long prompt is tokenized with the GIL released: the server tokenizes on its intake worker thread, and a
600 KB prompt's plain ``tokenizers`` encode held the GIL ~0.5 s, in which the event loop (/health, every
stream) could not run (tests/server/test_server_hardening.py's huge-prompts test). The ids are the same."""

from __future__ import annotations

import threading
import time

from llmtrace.backend.model.tokenizer import Tokenizer

LONG = ("Claim C-{n}: the pallet arrived crushed at 07:4{d}, photos attached; see  ticket #{n}{d}.\n"
        "Réclamation n°{n} — 配送済み {d} ✅ ")


def _long_text(chars: int) -> str:
    parts, n = [], 0
    while sum(map(len, parts)) < chars:
        parts.append(LONG.format(n=n, d=n % 10))
        n += 1
    return "".join(parts)


def test_long_and_short_texts_encode_to_the_plain_encoders_ids(tokenizer: Tokenizer) -> None:
    for text in (_long_text(9_000), _long_text(40_000), _long_text(600), "short text", ""):
        assert tokenizer.encode(text) == tokenizer._tk.encode(text, add_special_tokens=False).ids


def test_another_thread_runs_while_a_long_prompt_is_tokenized(tokenizer: Tokenizer) -> None:
    text = "hello world " * 50000  # the huge-prompts test's 600 KB prompt
    ticks, stop = [0], threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            time.sleep(0.001)
            ticks[0] += 1

    other = threading.Thread(target=ticker)
    other.start()
    time.sleep(0.02)
    before = ticks[0]
    t0 = time.perf_counter()
    ids = tokenizer.encode(text)
    took = time.perf_counter() - t0
    during = ticks[0] - before
    stop.set()
    other.join()
    assert len(ids) > 50_000
    # holding the GIL the ticker makes no step at all (0-1 in ~0.4 s); released, it keeps on stepping
    assert during >= 5, f"the other thread stepped {during} times in {took:.3f} s of encoding"
