"""Retrieved passages sent as JSON (evidence_shape.py reads the rest): an array of objects, an object holding
one, or one object a line, each passage an object's longest string and labelled by an id-like key."""

from __future__ import annotations

import json
import re

from llmtrace.tracer.reading.evidence_run import MIN_CHARS

# a JSON document's key that names it (its id, source or title), not its content
_JSON_LABEL = re.compile(r"(?:[\w-]*[_-])?(?:id|key|source|src|url|uri|title|name|ref|path|file)|[a-z]+Id", re.IGNORECASE)
_JSON_START = re.compile(r"^[ \t]*[\[{]", re.MULTILINE)
# JSON passages on the cue's line ("Documents: [{...}]"): JSON after a colon (a scan few prompts match), then a cue word
_JSON_AFTER_COLON = re.compile(r":[ \t]*(?=[\[{]\s*[\[{\"])")


def inline_documents(text: str, announces: re.Pattern[str]) -> list[tuple[str, str | None]] | None:
    """JSON passages right after a cue on the same line ("Documents: [...]"), the line's head naming the
    material (``announces``), or None."""
    for m in _JSON_AFTER_COLON.finditer(text):
        head = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        if len(head) <= 140 and announces.search(head) and (documents := json_documents(text[m.end():])):
            return documents
    return None


def json_documents(block: str) -> list[tuple[str, str | None]] | None:
    """Passages given as JSON right after the cue: an array of objects (or an object holding one), or one
    object a line; each passage is an object's longest string, labelled by its id-like key's value. None
    when the block does not open with such JSON or it holds fewer than two passages."""
    start = _JSON_START.search(block)
    if start is None or block[:start.start()].strip():
        return None
    at = start.end() - 1
    decoder = json.JSONDecoder()
    try:
        doc, _ = decoder.raw_decode(block, at)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        lists = [v for v in doc.values() if isinstance(v, list)]
        doc = lists[0] if len(lists) == 1 else [doc]
    if isinstance(doc, list) and len(doc) == 1 and block[at] == "{":  # perhaps one object a line (JSON Lines)
        doc = []
        for line in block[at:].splitlines():
            if not line.strip():
                break
            try:
                doc.append(json.loads(line))
            except ValueError:
                break
    if not isinstance(doc, list):
        return None
    out: list[tuple[str, str | None]] = []
    for item in doc:
        if not isinstance(item, dict):
            return None
        strings = [v for v in item.values() if isinstance(v, str)]
        body = max(strings, key=len, default="")
        if len(body) >= MIN_CHARS:
            label = next((str(v) for k, v in item.items() if _JSON_LABEL.fullmatch(str(k)) and isinstance(v, (str, int))
                          and v != body and str(v).strip()), None)
            out.append((body, label))
    return out if len(out) >= 2 else None
