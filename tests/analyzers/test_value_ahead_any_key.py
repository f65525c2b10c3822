"""A value ahead of fixed text is named by its kind, and retrieved notes stay a block, whatever the store's hash key.

In hashes mode the analyzer sees content-defined pieces, and where the cuts fall is the hash key's (each
store has its own). The identical run after a changed value starts at the first cut the two prompts share;
how far past the value that falls depends on the key, so a rule on that distance named a uuid under one key
and "a changing block" under another (CI's key failed test_cache_changing_block's uuid case at 637f4c2).
Here the same prompts are recorded under 40 keys, as the middleware records them, and compared as
``diagnose`` compares them: the uuid is named under every key, and a uuid followed by retrieved notes that
change too (a block, not a value) is not taken for the uuid.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator

import pytest

from llmtrace.analyzers.cache import prompt_compare
from llmtrace.tracer.reading import prompt_segments
from llmtrace.tracer.record import capture
from llmtrace.tracer.registry import names as N

FIXED = ("Answer for the harbour office. Ask for the berth number and the arrival date, quote the tariff that "
         "applies, and never promise a berth before the harbour master confirms it. Keep it under ninety words. "
         ) * 4
WORDS = "mooring fender cleat warp bollard pontoon slipway crane fuel dock tide gauge buoy chain".split()


def _notes(rng: random.Random) -> str:
    return "Notes for this skipper: " + " ".join(rng.choice(WORDS) for _ in range(30)) + ".\n"


def _uuid(rng: random.Random) -> str:
    return f"req {rng.getrandbits(128):032x}: "


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    yield [random.Random(n).randbytes(32).hex() for n in range(40)]
    monkeypatch.delenv(capture.KEY_ENV, raising=False)
    capture.use_store_key(None)  # a random key again, as a process without a store has


Prompt = Callable[[random.Random, int], list[tuple[str, str]]]  # the segments of call i


def _compared(key: str, prompt: Prompt, monkeypatch: pytest.MonkeyPatch) -> list[prompt_compare._Compare]:
    """How each of 6 prompts differs from the one before, recorded as the middleware records them (hashes)
    under hash key ``key`` and compared as ``diagnose`` compares them."""
    monkeypatch.setenv(capture.KEY_ENV, key)
    capture.use_store_key(None)
    rng = random.Random(f"harbour {key}")
    prompts = []
    for i in range(7):
        attrs = prompt_segments.prompt_attributes(prompt(rng, i), "hashes")
        found = prompt_compare._segments(attrs[N.PROMPT_SEGMENTS], None)
        assert found is not None
        prompts.append(found)
    return [prompt_compare._compare(cur, prev) for prev, cur in zip(prompts, prompts[1:])]


def _value_classes(key: str, head: Callable[[random.Random], str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The value each prompt with ``head`` ahead of the instructions in the user's turn differs by."""
    def prompt(rng: random.Random, i: int) -> list[tuple[str, str]]:
        return [("user", head(rng) + "Policy follows.\n" + FIXED + f"\n\nBerth {40 + i}: may I moor a 12 m boat tonight?")]
    return [c.value_class for c in _compared(key, prompt, monkeypatch)]


def test_a_uuid_ahead_of_the_instructions_is_named_under_every_key(
        keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    missed = {k[:8]: found for k in keys if (found := _value_classes(k, _uuid, monkeypatch)) != ["uuid"] * 6}
    assert not missed, json.dumps(missed)


def test_a_uuid_with_changing_notes_after_it_is_a_block_not_a_value(
        keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    found = [c for k in keys for c in _value_classes(k, lambda rng: _uuid(rng) + _notes(rng), monkeypatch)]
    assert found.count("uuid") * 10 <= len(found), f"{found.count('uuid')} of {len(found)} pairs named the uuid"


def _window_classes(key: str, head: Callable[[random.Random], str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each prompt with ``head`` at the top of the system prompt differs by."""
    def prompt(rng: random.Random, i: int) -> list[tuple[str, str]]:
        return [("system", head(rng) + FIXED), ("user", f"Berth {i}?")]
    return [c.window_class for c in _compared(key, prompt, monkeypatch)]


def test_retrieved_notes_in_the_system_prompt_stay_a_block_under_every_key(
        keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """(About one pair in 25 draws two blocks of the same length, which reads as a fixed-width field.)"""
    found = [c for k in keys for c in _window_classes(k, lambda rng: _notes(rng) + _notes(rng), monkeypatch)]
    assert found.count("block") >= 0.95 * len(found), found
