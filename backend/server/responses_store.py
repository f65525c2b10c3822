"""The responses ``llmtrace serve`` keeps for ``previous_response_id`` and ``GET /v1/responses/{id}``: an
in-memory LRU bounded by count and bytes. Like the API's ``store`` (on by default, ``store: false`` opts out),
it holds conversation text in memory only; nothing of it reaches the trace store.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept response: the conversation it ended with (JSON), its response object (JSON) and the id of
    the conversation it belongs to (the same for every response of one previous_response_id chain)."""

    conversation: bytes
    response: bytes
    conversation_id: str

    @property
    def size(self) -> int:
        return len(self.conversation) + len(self.response)


@dataclass(slots=True)
class ResponsesStore:
    """The conversations of recent responses, least recently used dropped first; bounded by count and by
    bytes, so a long-running server holds a fixed amount of text however it is used."""

    max_responses: int = 1024
    max_chars: int = 32 << 20
    _items: OrderedDict[str, Kept] = field(default_factory=OrderedDict)
    _chars: int = 0

    def put(self, response_id: str, conversation: list[dict[str, Any]], response: dict[str, Any] | None = None,
            conversation_id: str | None = None) -> None:
        kept = Kept(orjson.dumps(conversation), orjson.dumps(response) if response is not None else b"",
                    conversation_id or response_id)
        if kept.size > self.max_chars:
            return
        self._drop(response_id)
        self._items[response_id] = kept
        self._chars += kept.size
        while len(self._items) > self.max_responses or self._chars > self.max_chars:
            self._drop(next(iter(self._items)))

    def kept(self, response_id: str) -> Kept | None:
        item = self._items.get(response_id)
        if item is not None:
            self._items.move_to_end(response_id)
        return item

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation the response ended with (a fresh copy), or None when it is not (or no longer) kept."""
        item = self.kept(response_id)
        return orjson.loads(item.conversation) if item is not None else None

    def response(self, response_id: str) -> bytes | None:
        """The response object as JSON (``GET /v1/responses/{id}``)."""
        item = self._items.get(response_id)
        return item.response or None if item is not None else None

    def delete(self, response_id: str) -> bool:
        found = response_id in self._items
        self._drop(response_id)
        return found

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, response_id: str) -> None:
        old = self._items.pop(response_id, None)
        if old is not None:
            self._chars -= old.size
