"""Credentials in what other apps send are scrubbed before they are stored, in every capture mode."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from collector_helpers import otlp_provider, query, start_collector
from opentelemetry.trace import SpanKind, Status, StatusCode

from llmtrace.tracer.record import capture

KEY = "sk-proj-" + "A1b2C3d4" * 4
GH = "ghp_" + "x" * 36
SECRETS = (KEY, GH, "hunter2hunter2", "Zm9vYmFyYmF6cXV4", "sess-0123456789abcdef")


@pytest.mark.parametrize("mode", ["none", "hashes", "full"])
def test_header_and_credential_attributes_are_scrubbed(tmp_path: Path, mode: str) -> None:
    col = start_collector(tmp_path, "--capture", mode)
    try:
        tp = otlp_provider(col.endpoint, "app", **{"deployment.token": "Zm9vYmFyYmF6cXV4"})
        t = tp.get_tracer("t")
        s = t.start_span("POST /v1/chat/completions", kind=SpanKind.CLIENT, attributes={
            "http.request.header.authorization": [f"Bearer {KEY}"],
            "http.request.header.x-api-key": ["hunter2hunter2"],
            "http.request.header.cookie": ["session=sess-0123456789abcdef"],
            "http.request.header.content-type": ["application/json"],
            "openai.api_key": KEY, "db.password": "hunter2hunter2",
            "note": f"called with token={GH} and key {KEY}",
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 12, "gen_ai.prompt.0.content": f"my key is {KEY}",
            "http.route": "/v1/chat/completions"})
        s.add_event("retry", {"http.request.header.authorization": f"Bearer {KEY}"})
        s.set_status(Status(StatusCode.ERROR, f"401 for key {KEY}"))
        s.end()
        # llmtrace's own span shape goes through the same scrubbing
        t.start_span("llmtrace.pass", attributes={"llmtrace.side": "client", "api_key": KEY}).end()
        tp.shutdown()
        col.wait_written(2)
        # OTLP/JSON too
        body = {"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "json", "attributes": [
                {"key": "http.request.header.Authorization", "value": {"arrayValue": {"values": [
                    {"stringValue": f"Bearer {KEY}"}]}}},
                {"key": "x", "value": {"stringValue": f"Bearer {GH}"}}]}]}]}]}
        assert httpx.post(col.endpoint, json=body).status_code == 200
        col.wait_written(3)
    finally:
        assert col.stop() == 0
    rows = query(col.db, "SELECT name, attributes, resource, events, status_message FROM spans ORDER BY name")
    text = json.dumps(rows)
    for secret in SECRETS:
        assert secret not in text, (mode, secret)
    # a secret inside text becomes a keyed marker, [REDACTED:<8 hex>]; a credential attribute, plain [REDACTED]
    markers = capture.REDACTED_MARKER.findall(text)
    assert markers and len(set(markers)) > 1, "two different secrets share one marker"
    by_name = {r[0]: r for r in json.loads(capture.REDACTED_MARKER.sub("[REDACTED]", text))}
    a = json.loads(by_name["POST /v1/chat/completions"][1])
    assert a["http.request.header.authorization"] == "[REDACTED]"
    assert a["http.request.header.x-api-key"] == "[REDACTED]" and a["db.password"] == "[REDACTED]"
    assert a["http.request.header.content-type"] == ["application/json"]  # not a credential: kept
    assert a["gen_ai.usage.input_tokens"] == 12 and a["http.route"] == "/v1/chat/completions"
    assert a["note"] == "called with [REDACTED] and key [REDACTED]"
    assert by_name["POST /v1/chat/completions"][4] == "401 for key [REDACTED]"
    assert json.loads(by_name["POST /v1/chat/completions"][2])["deployment.token"] == "[REDACTED]"
    if mode == "full":
        assert a["gen_ai.prompt.0.content"] == "my key is [REDACTED]"
    assert json.loads(by_name["json"][1]) == {"http.request.header.Authorization": "[REDACTED]",
                                               "x": "[REDACTED]"}


def test_token_rule_answers_as_its_look_behind_regex() -> None:
    """scrub matches "token" literally and checks the look-behind in Python (the regex with a leading
    look-behind was tried at every byte): the same answer as ``(?<!first_)token(?:[\\s:=\\"\\x12]|$)`` on
    random texts built of its edge pieces, as text and as bytes."""
    import random
    import re

    from llmtrace.tracer.collect import scrub

    rule = re.compile(r"(?<!first_)token(?:[\s:=\"\x12]|$)")
    rule_pb = re.compile(rule.pattern.encode())
    pieces = ["token", "first_token", "first_", "tok", "en", ":", " ", "=", '"', "\x12", "x", "_", "tokens",
              "input_tokens", "\n", "st_"]
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert scrub._token(text) == (rule.search(text) is not None), text
        assert scrub._token_pb(text.encode()) == (rule_pb.search(text.encode()) is not None), text


def test_one_pass_request_test_answers_as_suspect_bytes() -> None:
    """The request-wide test (``suspect_protobuf``: one RE2 pass, the token rule's look-behind spelled out)
    gives ``suspect_bytes``'s answer on random bytes built of every piece's edges: each case, upper case,
    the look-behind's partial prefixes, whitespace RE2's ``\\s`` lacks (\\x0b), bytes that are not UTF-8,
    and letters that case-fold to ASCII ones in Unicode (the Kelvin sign, the long s)."""
    import random

    from llmtrace.tracer.collect import scrub

    pieces = [b"token", b"TOKEN", b"Token", b"first_token", b"FIRST_TOKEN", b"First_", b"first_", b"irst_", b"rst_",
              b"st_", b"t_", b"_", b"tok", b"en", b":", b" ", b"=", b'"', b"\x12", b"\x0b", b"\x0c", b"\t", b"\r",
              b"\n", b"x", b"tokens", b"input_tokens", b"\x80", b"\xff", b"\xc3", b"\xe2\x84\xaa", b"\xc5\xbf", b"\x00",
              b"sk", b"-", b"SK-", b"k", b"ey", b"KEY", b"Au", b"th", b"gh", b"p", b"GHS_", b"xo", b"eyJ", b"aki",
              b"passw", b"cook", b"ie", b"f", b"F", b"i", b"I", b"s", b"r", b"R"]
    rng = random.Random(11)
    seen = set()
    for _ in range(20000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        expected = scrub.suspect_bytes(raw)
        seen.add(expected)
        assert scrub.suspect_protobuf(raw) == expected, raw
    assert seen == {True, False}
