"""Where ``llmtrace collect`` asks what a foreign chat span's messages show about its conversation: a history
rewritten by a compaction (``loop.compaction``), read as the client middleware reads it off the wire.

The conversation tracker lives in ``adapters`` (adapters/sessions.py), which the tracer may not import (the
tracer is the floor of the import contracts), so the ``llmtrace collect`` command installs a reader here
(llmtrace/collect_cli.py) and the mapper calls it with each chat span's messages, by service. With no
reader installed (a collector embedded without the adapters), nothing is read.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from llmtrace.tracer.collect.otlp_segments import messages

_SYSTEM_ROLES = ("system", "developer")


class ConversationReader(Protocol):
    def compaction(self, service: str | None, segments: list[tuple[str, str]], end_ns: int) -> dict[str, object] | None:
        """``loop.compaction`` values when this request (``segments``: kind, text as the middleware names
        them) rewrote the history of an earlier request of its conversation, else None."""
        ...


_readers: list[ConversationReader] = []
_lock = threading.Lock()


def install(reader: ConversationReader) -> None:
    with _lock:
        _readers[:] = [reader]


def uninstall() -> None:
    with _lock:
        _readers.clear()


def chat_segments(attrs: Mapping[str, object]) -> list[tuple[str, str]]:
    """(kind, text) of a chat span's input messages, named as the prompt segments are: system, the last
    user turn as ``user``, every other as ``history:<role>``; [] when the span recorded none."""
    msgs = messages(attrs)
    last_user = max((i for i, (role, _) in enumerate(msgs) if role == "user"), default=-1)
    return [("system" if role in _SYSTEM_ROLES else "user" if i == last_user else f"history:{role}", text)
            for i, (role, text) in enumerate(msgs)]


def compaction_values(service: str | None, attrs: Mapping[str, object], end_ns: int) -> dict[str, object] | None:
    reader = _readers[0] if _readers else None
    if reader is None:
        return None
    segments = chat_segments(attrs)
    return reader.compaction(service, segments, end_ns) if segments else None
