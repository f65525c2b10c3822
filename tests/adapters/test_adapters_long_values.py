"""A long kebab-case value in a prompt costs the app's thread time linear in its length, and the ids the
prompt's fields record are the ones the id pattern's own ``finditer`` finds.

Before: the id pattern's lookaheads read to the end of the run at every word start of "a-b-c-...", so
20 KB of it took 3 s of CPU in ``fields``; this test's call (two 40 KB runs) took 32 s (load ~3).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import openai
import pytest
from adapters_fake_provider import CHAT_OK, Script, fake_provider
from adapters_store import rows

from llmtrace.adapters import instrument
from llmtrace.tracer.reading import prompt_segments

_BITS = ("a", "b", "Z", "-", "--", "_", "1", "42", "é", "\u0663", " ", ".", "x9", "k-", "-7", "ab_1", "\n")


@pytest.mark.parametrize("seed", range(60))
def test_ids_are_the_patterns_own_matches(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choices(_BITS, k=rng.randint(0, 400)))
    pattern = dict(prompt_segments._VOLATILE)["id"]
    assert [m.span() for m in prompt_segments._ids(text)] == [m.span() for m in pattern.finditer(text)]


def test_a_long_kebab_case_value_costs_linear_time(traced: Path) -> None:
    letters = "-".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(20_000))  # 40 KB, no digit
    digits = "-".join(str(i % 10) for i in range(20_000))  # 40 KB, no letter
    content = f"Slug {letters} and {digits}, then order KF-2201-b."
    with fake_provider() as provider:
        provider.scripts["/v1/chat/completions"] = Script(chunks=[CHAT_OK])
        client = instrument(openai.OpenAI(api_key="sk-test", base_url=f"{provider.base_url}/v1", max_retries=0))
        t0 = time.process_time()
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": content}],
                                       max_tokens=1)
        cpu = time.process_time() - t0
    assert cpu < 2.0, f"{cpu:.2f} s of CPU for one call"  # 32 s before
    (found,) = rows(traced, "SELECT attributes FROM spans WHERE operation = 'chat' AND stage IS NULL")
    segments = json.loads(found["attributes"]["llmtrace.prompt.segments"])
    assert any(f["class"] == "id" and f["chars"] == len("KF-2201-b") for s in segments for f in s.get("fields", ()))
