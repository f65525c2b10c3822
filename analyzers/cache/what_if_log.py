"""``llmtrace diagnose --what-if-log FILE``: the recorded requests as a new request log with each volatile
window the cache findings named moved after the stable part, so the fix can be measured, not just predicted.

Needs full capture (``capture="full"``: the prompt text is stored). One JSON object a line, oldest first:

    {"trace_id": "...", "endpoint": "/v1/chat/completions", "body": {...}, "moved": {"segment": "system",
     "chars": 36, "class": "uuid"} | null}

``body`` is an OpenAI-style request rebuilt from what the store kept: the model, the messages in order
(roles and text), the tools, and every recorded request parameter (temperature, top_p, top_k, seed,
max_tokens, the penalties, stream, a JSON response_format). The window is cut out of its segment and
appended to the end of the last user message: the prefix every call of the template shares then stops
only where the user's own turn begins. Post each ``body`` to the server and read the hit rate of the new
store (docs/diagnose.md shows the loop); the first summary line says what the replay predicted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

import duckdb

from llmtrace.analyzers.cache import kv_replay
from llmtrace.analyzers.cache import what_if as replay
from llmtrace.analyzers.cache.cache_loss import causes, load
from llmtrace.analyzers.cache.prompt_compare import _segments, classify
from llmtrace.analyzers.core.query import Query, as_float
from llmtrace.tracer.registry import names as N

# recorded request values -> request body fields (what the store keeps of a request; nothing else is known)
_PARAMS = {N.GEN_AI_REQUEST_TEMPERATURE: "temperature", N.GEN_AI_REQUEST_TOP_P: "top_p",
           N.GEN_AI_REQUEST_TOP_K: "top_k", N.GEN_AI_REQUEST_SEED: "seed",
           N.GEN_AI_REQUEST_MAX_TOKENS: "max_tokens", N.GEN_AI_REQUEST_FREQUENCY_PENALTY: "frequency_penalty",
           N.GEN_AI_REQUEST_PRESENCE_PENALTY: "presence_penalty"}
_INTS = {"seed", "max_tokens", "top_k"}


@dataclass(slots=True)
class LogResult:
    written: int = 0
    rewritten: int = 0
    no_text: int = 0  # passes whose prompt text was not stored (capture hashes or none)
    segments: list[str] = field(default_factory=list)  # the segments a window was moved out of
    predicted: float | None = None  # the replay's hit rate with the windows moved
    measured: float | None = None  # what the engine reported for the recorded traffic


def _role(kind: str) -> str | None:
    if kind in ("system", "system_late"):
        return "system"
    if kind.startswith("history:"):
        return kind.split(":", 1)[1]
    if kind == "tool_result":
        return "tool"
    return kind if kind in ("user", "assistant") else None


def _common_prefix(texts: list[str]) -> int:
    first, n = texts[0], min(len(t) for t in texts)
    return next((i for i in range(n) if any(t[i] != first[i] for t in texts)), n)


def _common_suffix(texts: list[str], limit: int) -> int:
    first, n = texts[0], min(min(len(t) for t in texts), limit)
    return next((i for i in range(n) if any(t[len(t) - 1 - i] != first[len(first) - 1 - i] for t in texts)), n)


@dataclass(slots=True)
class _Cut:
    start: int  # where the window begins (the same in every prompt of the template)
    suffix: int  # chars after the window (the same in every prompt)


def _cuts(texts: list[str]) -> _Cut | None:
    """The one window the texts of a segment differ in: common prefix and suffix, the start pulled back to
    where the value begins (a diff starts mid-value: the minutes of a timestamp)."""
    if len(set(texts)) < 2:
        return None
    p = _common_prefix(texts)
    s = _common_suffix(texts, min(len(t) for t in texts) - p)
    start = min(classify(t, p, len(t) - s)[1] for t in texts)
    return _Cut(min(start, p), s)


def _pass_rows(q: Query) -> list[dict[str, object]]:
    return q.rows(f"""SELECT trace_id, start_ns, service, model, operation, client_span_id, server_span_id
                      FROM {q.passes} ORDER BY start_ns""")


def _attributes(q: Query, span_ids: list[str]) -> tuple[dict[str, dict[str, object]], dict[str, list[dict[str, object]]]]:
    rows = q.rows(f"""SELECT span_id, parent_span_id, stage, attributes FROM {q.spans}
                      WHERE span_id IN (SELECT unnest(?::VARCHAR[])) OR parent_span_id IN (SELECT unnest(?::VARCHAR[]))""",
                  [span_ids, span_ids])
    own: dict[str, dict[str, object]] = {}
    under: dict[str, list[dict[str, object]]] = {}
    wanted = set(span_ids)
    for r in rows:
        try:
            a = json.loads(str(r["attributes"])) if r["attributes"] is not None else {}
        except ValueError:
            a = {}
        if not isinstance(a, dict):
            a = {}
        if r["stage"] is None and str(r["span_id"]) in wanted:
            own[str(r["span_id"])] = a
        elif r["parent_span_id"] is not None:
            under.setdefault(str(r["parent_span_id"]), []).append(a)
    return own, under


def _params(spans: Iterable[dict[str, object]]) -> dict[str, object]:
    body: dict[str, object] = {}
    for a in spans:
        for key, name in _PARAMS.items():
            v = a.get(key)
            if v is not None and name not in body:
                f = as_float(v)
                body[name] = int(f) if name in _INTS else f
        if "stream" not in body and isinstance(a.get(N.STREAM_REQUESTED), bool):
            body["stream"] = a[N.STREAM_REQUESTED]
        if "response_format" not in body and a.get(N.GEN_AI_OUTPUT_TYPE) == "json":
            body["response_format"] = {"type": "json_object"}
    if body.get("top_k") == 0:
        del body["top_k"]  # the engine records "off" as 0; a request leaves it out
    return body


def write_log(q: Query, out: IO[str]) -> LogResult:
    """Write the what-if request log of the store's passes to ``out``; what was written and predicted."""
    res = LogResult()
    loss = load(q)
    window = [c for c in causes(loss) if c.kind == "window" and
              not any(p.window_class == "reordered" for p in c.passes)]
    targets = {(p.service, p.model, p.segment) for c in window for p in c.passes if p.segment}
    if loss:
        prompt = sum(p.prompt_tokens for p in loss)
        res.measured = sum(min(p.cached_tokens, p.prompt_tokens) for p in loss) / prompt if prompt else None
    if window and all(p.chain for c in window for p in c.passes):
        pool = kv_replay.pool(q)
        res.predicted = replay.replay_fixed(window, loss, pool).token_rate
    rows = _pass_rows(q)
    ids = [str(r[k]) for r in rows for k in ("client_span_id", "server_span_id") if r[k] is not None]
    own, under = _attributes(q, ids)
    prompts: list[tuple[dict[str, object], str, list[tuple[str, str]], bool]] = []
    for r in rows:
        sid = str(r["client_span_id"] if r["client_span_id"] is not None else r["server_span_id"])
        a = own.get(sid, {})
        p = _segments(a.get(N.PROMPT_SEGMENTS), a.get(N.PROMPT_TEXT))
        if (p is None or p.texts is None) and r["server_span_id"] is not None:  # the server's record, if full
            sid = str(r["server_span_id"])
            a = own.get(sid, {})
            p = _segments(a.get(N.PROMPT_SEGMENTS), a.get(N.PROMPT_TEXT))
        if p is None or p.texts is None:
            res.no_text += 1
            continue
        segs = [(str(s.get("kind")), t) for s, t in zip(p.segs, p.texts, strict=True)]
        # the server's record: each message's share of the *rendered* prompt (template markers included)
        prompts.append((r, sid, segs, sid == str(r["server_span_id"])))
    # one cut per (service, model, segment kind) a window cause named, from every prompt that has it
    cuts: dict[tuple[object, object, str], _Cut] = {}
    for key in targets:
        texts = [t for r, _, segs, _ in prompts if (r["service"], r["model"]) == key[:2] for k, t in segs if k == key[2]]
        cut = _cuts(texts) if texts else None
        if cut is not None:
            cuts[key] = cut
    res.segments = sorted({k[2] for k in cuts})
    # where a rendered turn's own words end: before the end-of-turn marker every rendered turn ends with
    ends = [t for _, _, segs, rendered in prompts if rendered for k, t in segs if k != "generation_prompt"]
    user_suffix = _common_suffix(ends, min(len(t) for t in ends) - 1) if ends else 0
    for r, sid, segs, rendered in prompts:
        moved: list[tuple[str, str]] = []
        new: list[tuple[str, str]] = []
        for kind, text in segs:
            cut = cuts.get((r["service"], r["model"], kind))
            end = len(text) - cut.suffix if cut is not None else 0
            if cut is not None and end > cut.start:
                stable = text[:cut.start] + text[end:]
                if kind != "tools" or _parses(stable):
                    moved.append((kind, text[cut.start:end]))
                    text = stable
            new.append((kind, text))
        spans = [own.get(sid, {}), *under.get(sid, [])]
        body = _rendered_body(r, new, moved, user_suffix, spans) if rendered else _body(r, new, moved, spans)
        if body is None:
            res.no_text += 1
            continue
        endpoint = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        info = {"segment": ",".join(k for k, _ in moved), "chars": sum(len(t) for _, t in moved),
                "class": classify("".join(t for _, t in moved), 0, sum(len(t) for _, t in moved))[0]} if moved else None
        out.write(json.dumps({"trace_id": r["trace_id"], "endpoint": endpoint, "body": body, "moved": info},
                             ensure_ascii=False) + "\n")
        res.written += 1
        res.rewritten += bool(moved)
    return res


def _parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False


def _rendered_body(r: dict[str, object], segs: list[tuple[str, str]], moved: list[tuple[str, str]], suffix: int,
                  spans: list[dict[str, object]]) -> dict[str, object]:
    """A server-side record as a completions request: the rendered prompt as the engine saw it, the windows
    put at the end of the last user turn's words (before its end-of-turn marker). The server records each
    message's rendered share, not the message, so the template is already applied: /v1/completions takes
    the prompt as given."""
    pieces = [t for _, t in segs]
    last = next((i for i in range(len(segs) - 1, -1, -1) if segs[i][0] == "user"), len(segs) - 1)
    if moved and pieces:
        t = pieces[last]
        cut = len(t) - min(suffix, len(t))
        pieces[last] = t[:cut] + "".join(f"\n{w}" for _, w in moved) + t[cut:]
    body: dict[str, object] = {"model": r["model"], "prompt": "".join(pieces)}
    body.update(_params(spans))
    return body


def _body(r: dict[str, object], segs: list[tuple[str, str]], moved: list[tuple[str, str]],
          spans: list[dict[str, object]]) -> dict[str, object] | None:
    body: dict[str, object] = {"model": r["model"]}
    tail = "".join(f"\n{t}" for _, t in moved)  # the windows, in prompt order, after the user's own words
    if r["operation"] == "text_completion":
        text = "".join(t for k, t in segs)
        body["prompt"] = text + tail
    else:
        messages: list[dict[str, object]] = []
        for kind, text in segs:
            if kind == "tools":
                try:
                    body["tools"] = json.loads(text)
                except ValueError:
                    return None
                continue
            role = _role(kind)
            if role is not None:
                messages.append({"role": role, "content": text})
        if not messages:
            return None
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"), len(messages) - 1)
        messages[last] = {**messages[last], "content": f"{messages[last]['content']}{tail}"}
        body["messages"] = messages
    body.update(_params(spans))
    return body


def run_log(conn: duckdb.DuckDBPyConnection, path: str, since_ns: int | None, service: str | None) -> int:
    """The CLI's ``--what-if-log FILE``: write the log, say what it holds and what the replay predicts."""
    import os
    import sys

    q = Query(conn, since_ns, service)
    tmp = f"{path}.partial"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            res = write_log(q, out)
    except OSError as exc:
        print(f"llmtrace diagnose: cannot write the what-if log {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        q.release()
    if not res.written:
        os.unlink(tmp)
        why = (f"none of the {res.no_text} passes has its prompt text stored: record with capture='full' "
               "(llmtrace.init(capture='full'))" if res.no_text else "the store holds no passes in this selection")
        print(f"llmtrace diagnose: no what-if log written: {why}", file=sys.stderr)
        return 1
    os.replace(tmp, path)
    where = f" (volatile window moved out of: {', '.join(res.segments)})" if res.segments else \
        " (no volatile window found: the requests are as recorded)"
    print(f"wrote {res.written} requests to {path}, {res.rewritten} rewritten{where}")
    if res.no_text:
        print(f"left out {res.no_text} passes whose prompt text was not stored")
    if res.predicted is not None:
        measured = f"{res.measured:.1%}" if res.measured is not None else "n/a"
        print(f"replayed hit rate with the windows moved: {res.predicted:.1%} (recorded: {measured}); "
              "post each line's body to the server and compare (docs/diagnose.md)")
    return 0
