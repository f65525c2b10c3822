"""The middleware's conversation reading for ``llmtrace collect``: a foreign instrumentation's chat spans
carry the messages array the app sent (with its content capture on), so the same tracker
(adapters/sessions.py) finds a history rewritten by a compaction and the names and numbers it dropped, and
the collector records ``loop.compaction`` as the middleware does (tracer/collect/conversation_hook.py).

One tracker per service: the collector serves many apps, and two apps' conversations that open alike are
not one conversation (the middleware's tracker is one per process, that is one per app).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .sessions import Tracker, compaction_values

_MAX_SERVICES = 256


class WireConversations:
    """A ``conversation_hook.ConversationReader`` over one :class:`Tracker` per service."""

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

    def compaction(self, service: str | None, segments: list[tuple[str, str]], end_ns: int) -> dict[str, object] | None:
        tracker = self._tracker(service)
        body = {"messages": [{"role": kind.rpartition(":")[2], "content": text} for kind, text in segments]}
        view = tracker.begin(body, segments)
        prompt_chars = sum(len(t) for _, t in segments)
        tracker.end(view, None, None, end_ns, prompt_chars)
        if not view.rewritten:
            return None
        return compaction_values(view, prompt_chars)
