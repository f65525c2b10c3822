"""The passage set's hash and placement that ``evidence_shape.values`` records with a shape (both writers,
middleware and collector, go through it): the same set in another order or under other labels hashes the
same, a changed passage does not; the hash is keyed by the store's key (a new key, a new hash, and never the
unkeyed in-memory key of a passage), and the place is the segment's kind (system, user, history)."""

from __future__ import annotations

import hashlib

import pytest

from llmtrace.tracer.reading import evidence_shape
from llmtrace.tracer.record import capture
from llmtrace.tracer.registry import names as N

CUE = "Use the company information below when you answer."
FACTS = ["Harbourline Freight was founded in 1998 in Aberdeen and runs twelve depots across Scotland and England.",
         "Standard deliveries arrive within three working days; next-day delivery costs an extra nine pounds.",
         "Customer service answers the phone from eight to six on weekdays and from nine to one on Saturdays.",
         "Lost parcels are refunded at their declared value up to five hundred pounds after a ten-day trace."]


def _values(passages: list[str], kind: str = "system", cue: str = CUE) -> dict[str, object]:
    found = evidence_shape.read([(kind, f"You help customers.\n\n{cue}\n\n" + "\n\n".join(passages)),
                                 ("user", "When do you open on Saturday?")])
    assert found is not None
    return evidence_shape.values(*found)


def test_the_set_not_the_order_nor_the_labels() -> None:
    base = _values(FACTS[:3])
    assert base[N.EVIDENCE_PASSAGES_HASH] == _values([FACTS[2], FACTS[0], FACTS[1]])[N.EVIDENCE_PASSAGES_HASH]
    labelled = _values([f"[{i + 1}] {p}" for i, p in enumerate(FACTS[:3])], cue="Context:")
    assert labelled[N.EVIDENCE_ID_SCHEME] == "index"
    assert labelled[N.EVIDENCE_PASSAGES_HASH] == base[N.EVIDENCE_PASSAGES_HASH]
    assert _values(FACTS[1:4])[N.EVIDENCE_PASSAGES_HASH] != base[N.EVIDENCE_PASSAGES_HASH]


@pytest.mark.parametrize(("kind", "placement"), [("system", "system"), ("user", "user"), ("history:tool", "history"),
                                                 ("history:user", "history")])
def test_the_placement_is_the_segments_kind(kind: str, placement: str) -> None:
    assert _values(FACTS[:3], kind)[N.EVIDENCE_PLACEMENT] == placement


def test_the_hash_is_keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(capture.KEY_ENV, "11" * 32)
    capture.use_store_key(None)
    first = _values(FACTS[:3])[N.EVIDENCE_PASSAGES_HASH]
    monkeypatch.setenv(capture.KEY_ENV, "22" * 32)
    capture.use_store_key(None)
    second = _values(FACTS[:3])[N.EVIDENCE_PASSAGES_HASH]
    monkeypatch.delenv(capture.KEY_ENV)
    capture.use_store_key(None)
    assert isinstance(first, str) and first != second
    unkeyed = hashlib.blake2b(digest_size=8)
    for p in sorted(evidence_shape._key(p) for p in FACTS[:3]):
        unkeyed.update(bytes.fromhex(p))
    assert first != unkeyed.hexdigest()
    assert {evidence_shape._key(p) for p in FACTS[:3]}.isdisjoint({first, second})
