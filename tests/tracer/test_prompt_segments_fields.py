"""A segment's volatile values are found in time linear in its length (a long hex or base64 text in a prompt
made the middleware spend seconds on the app's thread) and are exactly the values the rule found before:
the rule as it stood, kept here as the reference, on random texts built to stress the overlaps and the
e-mail pattern's restarts."""

from __future__ import annotations

import base64
import random
import time

import pytest

from llmtrace.tracer.reading.prompt_segments import _VOLATILE, MAX_FIELDS, fields
from llmtrace.tracer.record import capture


def reference(text: str) -> list[dict[str, object]]:
    """fields() before the linear-time search (f5deea7), verbatim."""
    taken: list[tuple[int, int]] = []
    out: list[tuple[int, int, str]] = []
    for cls, pat in _VOLATILE:
        for m in pat.finditer(text):
            a, b = m.start(), m.end()
            if any(a < y and x < b for x, y in taken):
                continue
            taken.append((a, b))
            out.append((a, b, cls))
    out.sort()
    return [{"class": cls, "at": a, "chars": b - a, "before": capture.hash_text(text[:a]),
             "after": capture.hash_text(text[b:])}
            for a, b, cls in out[:MAX_FIELDS]]


_BITS = ("a@b.c+d@e.f", "x.y@z.com", "@", "+", ".", "-", "_", " ", "\n", "ann.lee+tag@example.org", "a@b", "@x.y",
         "3f2a9c1e-77b0-4d1a-9e55-0c1d2e3f4a5b", "2026-12-01T10:00:00Z", "10:05", "9:07 PM", "12/01/26", "1764580000",
         "deadbeef12", "INV-4411", "KF-2201", "48213", "aGVsbG8gd29ybGQgaGVsbG8=", "sk-proj-ABCDEFGHIJKLMNOPQRST",
         "zz", "Q", "7", "é", "\u200b", "ab12cd34ef56", "mail:", "<doc id=2>")


@pytest.mark.parametrize("seed", range(40))
def test_the_values_found_are_the_old_rules(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choices(_BITS, k=rng.randint(0, 300)))
    assert fields(text) == reference(text)


def test_a_real_prompt_lists_the_same_values() -> None:
    text = ("Ticket opened 2026-11-30 10:00 by ann.lee+x@example.org for booking BK-8801 (ref INV-4411, "
            "session 3f2a9c1e-77b0-4d1a-9e55-0c1d2e3f4a5b, epoch 1764580000, blob aGVsbG8gd29ybGQgaGVsbG8gd29y).")
    assert fields(text) == reference(text) and len(fields(text)) >= 6


def test_long_hex_and_base64_texts_take_linear_time() -> None:
    """Before: 20 KB of hex 1.9 s (the e-mail pattern retried at each position), 200 KB of base64 0.9 s
    (each id checked against every id taken); at these sizes tens of seconds to minutes."""
    rng = random.Random(1)
    hex_text = rng.randbytes(50_000).hex()  # 100 KB, one run with no @
    b64_text = base64.b64encode(rng.randbytes(600_000)).decode()  # 800 KB, ~36k id-like runs
    t0 = time.process_time()
    found = fields(hex_text), fields(b64_text)
    spent = time.process_time() - t0
    assert spent < 10.0, f"{spent:.1f} s CPU"  # ~0.1 s here; the old rule: minutes
    assert found[1] and all(f["class"] in ("base64_id", "id") for f in found[1])
    # the same values as the old rule where it is fast enough to compare
    assert fields(hex_text[:3000]) == reference(hex_text[:3000])
    assert fields(b64_text[:20000]) == reference(b64_text[:20000])
