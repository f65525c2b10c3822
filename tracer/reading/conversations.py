"""Conversation reading for ``llmtrace collect``: a foreign instrumentation's chat spans carry the messages
array the app sent (with its content capture on), so the middleware's own tracker (sessions.py) finds a
history rewritten by a compaction and the names and numbers it dropped, and the collector records
``loop.compaction`` as the middleware does.

One tracker per service: the collector serves many apps, and two apps' conversations that open alike are
not one conversation (the middleware's tracker is one per process, that is one per app). The collector's
mapper owns one :class:`Conversations` (tracer/collect/otlp_mapping.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from llmtrace.tracer.reading.sessions import Tracker, compaction_values

_MAX_SERVICES = 256
_SYSTEM_ROLES = ("system", "developer")


def chat_segments(messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(kind, text) of a chat span's input messages (role, text), named as the prompt segments are: system,
    the last user turn as ``user``, every other as ``history:<role>``."""
    last_user = max((i for i, (role, _) in enumerate(messages) if role == "user"), default=-1)
    return [("system" if role in _SYSTEM_ROLES else "user" if i == last_user else f"history:{role}", text)
            for i, (role, text) in enumerate(messages)]


class Conversations:
    """One :class:`Tracker` per service (the least recently seen forgotten past ``max_services``)."""

    def __init__(self, max_services: int = _MAX_SERVICES) -> None:
        self._trackers: OrderedDict[str, Tracker] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_services

    def _tracker(self, service: str | None) -> Tracker:
        key = service or ""
        with self._lock:
            tracker = self._trackers.get(key)
            if tracker is None:
                tracker = self._trackers[key] = Tracker()
                while len(self._trackers) > self._max:
                    self._trackers.popitem(last=False)
            self._trackers.move_to_end(key)
            return tracker

    def compaction(self, service: str | None, messages: list[tuple[str, str]], end_ns: int) -> dict[str, object] | None:
        """``loop.compaction`` values when this request's messages (role, text) rewrote the history of an
        earlier request of its conversation, else None."""
        segments = chat_segments(messages)
        if not segments:
            return None
        tracker = self._tracker(service)
        body = {"messages": [{"role": kind.rpartition(":")[2], "content": text} for kind, text in segments]}
        view = tracker.begin(body, segments)
        prompt_chars = sum(len(t) for _, t in segments)
        tracker.end(view, None, None, end_ns, prompt_chars)
        if not view.rewritten:
            return None
        return compaction_values(view, prompt_chars)
