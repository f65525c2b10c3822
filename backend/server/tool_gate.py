"""Holds streamed text back while it may still turn out to be a tool call.

With tools offered, the model answers either in plain text or with a JSON call; a reply whose first
non-blank character is ``{`` is a call. Until that character is seen nothing is sent; a call is then kept
back whole (it goes out as ``tool_calls`` at the end) and plain text flows as usual.
"""

from __future__ import annotations


class ToolGate:
    __slots__ = ("active", "_held", "_decided_text")

    def __init__(self, active: bool) -> None:
        self.active = active
        self._held: list[str] = []
        self._decided_text = not active

    def feed(self, delta: str) -> str:
        if self._decided_text:
            return delta
        self._held.append(delta)
        head = "".join(self._held).lstrip()
        if not head or head.startswith("{") or head.startswith("["):
            return ""
        self._decided_text = True
        return self.release()

    def release(self) -> str:
        out = "".join(self._held)
        self._held.clear()
        return out
