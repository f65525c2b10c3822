"""A real headless Chromium driven over the DevTools protocol (CDP), for the report's browser tests.

Debian's ``chromium`` is started with ``--remote-debugging-port=0`` (it writes the port it chose into the
profile folder), and one page target is driven over its WebSocket with ``websocket-client``: navigate,
evaluate JavaScript, click with real mouse events, take screenshots. Console messages, uncaught exceptions,
log entries (failed loads) and every network request are recorded, so a test can assert that a page
made no error and reached nothing outside the file.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Browser:
    binary: str
    width: int = 1280
    height: int = 900
    console: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _ws: websocket.WebSocket | None = None
    _profile: tempfile.TemporaryDirectory[str] | None = None
    _next: int = 0
    _log: list[dict[str, Any]] = field(default_factory=list)

    def start(self, timeout_s: float = 30.0) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="llmtrace-chromium-")
        profile = Path(self._profile.name)
        self._proc = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={profile}", f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {self._proc.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        while True:
            try:
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5).read())
                page = next(t for t in targets if t.get("type") == "page")
                break
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout_s, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        return self

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._profile is not None:
            self._profile.cleanup()

    # ── protocol ────────────────────────────────────────────────────────────────────────────────
    def send(self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
        assert self._ws is not None
        self._next += 1
        mid = self._next
        self._ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)
        raise TimeoutError(method)

    def wait_event(self, method: str, since: int = 0, timeout_s: float = 30.0) -> dict[str, Any]:
        """The first ``method`` event at or after position ``since`` of the event log, waiting for it; an event
        that arrived while a command was waiting for its answer is in the log already, so it is not missed."""
        assert self._ws is not None
        deadline = time.monotonic() + timeout_s
        while True:
            for msg in self._log[since:]:
                if msg.get("method") == method:
                    return msg.get("params", {})
            since = len(self._log)
            if time.monotonic() >= deadline:
                raise TimeoutError(method)
            self._event(json.loads(self._ws.recv()))

    def _event(self, msg: dict[str, Any]) -> None:
        self._log.append(msg)
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.console.append({"type": p.get("type"), "text": text})
            if p.get("type") in ("error", "assert"):
                self.errors.append(f"console.{p.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + str(p["entry"].get("text")) + " " + str(p["entry"].get("url", "")))
        elif method == "Network.requestWillBeSent":
            self.requests.append(str(p.get("request", {}).get("url")))

    # ── actions ─────────────────────────────────────────────────────────────────────────────────
    def open(self, url: str) -> None:
        mark = len(self._log)
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", since=mark)

    def js(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS failed: {r['exceptionDetails'].get('text')} in {expression[:80]}")
        return r.get("result", {}).get("value")

    def click(self, selector: str) -> None:
        """A real mouse click at the centre of the element (scrolled into view first)."""
        box = self.js(f"""(() => {{ const el = document.querySelector({json.dumps(selector)});
            if (!el) return null; el.scrollIntoView({{block: 'center'}});
            const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        if box is None:
            raise LookupError(f"no element matches {selector}")
        x, y = box
        before = self.js("location.href")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
        deadline = time.monotonic() + 5
        while self.js("location.href") == before and time.monotonic() < deadline:  # a link: wait for it to land
            time.sleep(0.02)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            w, h = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": w, "height": min(h, 16000),
                                                            "scale": 1})
        data = self.send("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
