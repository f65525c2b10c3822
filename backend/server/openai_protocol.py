"""OpenAI wire format: chat completions and completions requests in, responses and SSE chunks out.

Also takes the extra sampling fields vLLM accepts (top_k, min_p, repetition_penalty, ignore_eos,
stop_token_ids, skip_special_tokens) so benchmark clients written for vLLM can drive this server.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import orjson

from llmtrace.backend.generation.params import (
    Constraint,
    InvalidRequestError,
    SamplingParams,
    SpeculationConfig,
)
from llmtrace.backend.generation.tool_calls import tool_call_constraint
from llmtrace.backend.server.errors import bad_request
from llmtrace.backend.server.fields import (
    MAX_TOKENS_BOUND,
    get_bool,
    get_dict,
    get_int_list,
    get_number,
    get_str,
    get_str_list,
)
from llmtrace.backend.server.job import Job, Outcome

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
DEFAULT_MAX_TOKENS = 256


# Public names of the engine's speculation methods (``llmtrace serve --speculative`` and the per-request
# ``speculative`` field), vLLM-style: "draft" drafts with the model's own first layers.
SPECULATIVE: dict[str, Literal["none", "ngram", "self_draft"]] = {"off": "none", "none": "none", "ngram": "ngram", "draft": "self_draft", "self_draft": "self_draft"}
MAX_SPECULATIVE_K = 16
NO_SPECULATION = SpeculationConfig()


def speculation_config(method: str, k: int = 4, *, ngram_max: int = 3, draft_layers: int = 8,
                       where: str = "speculative") -> SpeculationConfig:
    """A SpeculationConfig from its public name; a bad name or size is a 400 naming ``where``."""
    engine_method = SPECULATIVE.get(method.strip().lower()) if isinstance(method, str) else None
    if engine_method is None:
        raise bad_request(f"'{where}' must be one of off, ngram or draft, got {method!r}", where)
    limits = (("k", k, MAX_SPECULATIVE_K), ("ngram_max", ngram_max, 8), ("draft_layers", draft_layers, 64))
    for name, value, top in limits:
        if not 1 <= value <= top:
            raise bad_request(f"'{where}.{name}' must be in 1..{top}, got {value}", where)
    return SpeculationConfig(method=engine_method, k=k, ngram_max=ngram_max,
                             draft_layers=draft_layers)


def request_speculation(body: dict[str, Any], default: SpeculationConfig = NO_SPECULATION) -> SpeculationConfig:
    """The request's ``speculative`` field: "off" / "ngram" / "draft", an object ``{"method": "ngram", "k": 6}``,
    or a boolean (true: the server's method, ngram when the server speculates not at all); absent: the
    server's default (``llmtrace serve --speculative``)."""
    value = body.get("speculative")
    if value is None:
        return default
    k = default.k
    if isinstance(value, bool):
        if not value:
            return NO_SPECULATION
        return default if default.method != "none" else speculation_config("ngram", k)
    if isinstance(value, str):
        return speculation_config(value, k, ngram_max=default.ngram_max, draft_layers=default.draft_layers)
    if isinstance(value, dict):
        return speculation_config(
            get_str(value, "method", "ngram" if default.method == "none" else default.method) or "ngram",
            get_number(value, "k", k, integer=True),
            ngram_max=get_number(value, "ngram_max", default.ngram_max, integer=True),
            draft_layers=get_number(value, "draft_layers", default.draft_layers, integer=True))
    raise bad_request("'speculative' must be off, ngram, draft, a boolean or an object with a 'method'",
                      "speculative")


def sampling_params(body: dict[str, Any], *, default_max_tokens: int, constraint: Constraint | None,
                    max_tokens_key: tuple[str, ...] = ("max_tokens",), stop_key: str = "stop",
                    logprobs: int | None = None,
                    speculation: SpeculationConfig = NO_SPECULATION) -> tuple[SamplingParams, bool]:
    """SamplingParams from a request body (OpenAI and vLLM names); bool: whether max_tokens was given.
    ``speculation``: the server's default, which the request's ``speculative`` field overrides."""
    max_tokens = None
    for key in max_tokens_key:
        max_tokens = get_number(body, key, max_tokens, integer=True, maximum=MAX_TOKENS_BOUND)
    top_k = get_number(body, "top_k", 0, integer=True)
    if top_k == -1:  # vLLM's spelling of "off"
        top_k = 0
    seed = get_number(body, "seed", None, integer=True)
    try:
        params = SamplingParams(
            temperature=float(get_number(body, "temperature", 1.0)),
            top_p=float(get_number(body, "top_p", 1.0)),
            top_k=top_k,
            min_p=float(get_number(body, "min_p", 0.0)),
            seed=seed,
            max_tokens=default_max_tokens if max_tokens is None else max_tokens,
            stop=get_str_list(body, stop_key),
            stop_token_ids=get_int_list(body, "stop_token_ids"),
            ignore_eos=get_bool(body, "ignore_eos", False),
            repetition_penalty=float(get_number(body, "repetition_penalty", 1.0)),
            frequency_penalty=float(get_number(body, "frequency_penalty", 0.0)),
            presence_penalty=float(get_number(body, "presence_penalty", 0.0)),
            logprobs=logprobs,
            skip_special_tokens=get_bool(body, "skip_special_tokens", True),
            detokenizer_holdback=(get_bool(body, "detokenizer_holdback")
                                  if body.get("detokenizer_holdback") is not None else None),
            moderation=_moderation(body),
            constraint=constraint,
            speculation=request_speculation(body, speculation),
        )
    except InvalidRequestError as exc:
        raise bad_request(str(exc), exc.param) from None
    return params, max_tokens is not None


def _moderation(body: dict[str, Any]) -> Any:
    """The request's ``moderation`` field, else ``llmtrace serve --moderation-words`` (a word-list check
    run every N tokens while streaming; see backend/generation/moderation.py)."""
    from llmtrace.backend.generation import moderation

    try:
        return moderation.resolve(body.get("moderation"))
    except ValueError as exc:
        raise bad_request(str(exc), "moderation") from None


def _check_n(body: dict[str, Any]) -> None:
    n = get_number(body, "n", 1, integer=True)
    if n != 1:
        raise bad_request(f"'n' must be 1 on this server (one choice per request), got {n}", "n")


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = get_bool(body, "stream", False)
    opts = get_dict(body, "stream_options") or {}
    include_usage = get_bool(opts, "include_usage", False) if stream else False
    return stream, include_usage


def _response_format(body: dict[str, Any]) -> tuple[Constraint | None, str]:
    fmt = get_dict(body, "response_format")
    if not fmt:
        return None, "text"
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None, "text"
    if kind == "json_object":
        return Constraint(kind="json_object", spec=None), "json"
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise bad_request("response_format.json_schema must be an object with a 'schema' object",
                              "response_format")
        return Constraint(kind="json_schema", spec=spec.get("schema") or {"type": "object"}), "json"
    raise bad_request(f"response_format.type must be text, json_object or json_schema, got {kind!r}",
                      "response_format")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise bad_request("'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] must be an object", f"messages[{i}]")
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}",
                              f"messages[{i}].role")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise bad_request(f"messages[{i}].content must be a string or a list of content parts",
                              f"messages[{i}].content")
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise bad_request(f"messages[{i}].content parts must be objects with a 'type'",
                                      f"messages[{i}].content")
                if part["type"] in ("image_url", "input_audio", "file"):
                    raise bad_request(f"messages[{i}].content: this model takes text only, got a "
                                      f"{part['type']!r} part", f"messages[{i}].content")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise bad_request(f"messages[{i}].content text parts need a string 'text'",
                                      f"messages[{i}].content")
        msg = dict(m)
        if role == "developer":
            msg["role"] = "system"
        elif role == "function":
            msg["role"] = "tool"
        out.append(msg)
    return out


def parse_chat(body: dict[str, Any], default_max_tokens: int = DEFAULT_MAX_TOKENS,
               speculation: SpeculationConfig = NO_SPECULATION) -> Job:
    model = get_str(body, "model")
    messages = _messages(body)
    _check_n(body)
    stream, include_usage = _stream_flags(body)
    constraint, output_type = _response_format(body)
    tools = body.get("tools")
    tool_choice = body.get("tool_choice", "auto")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad_request("'tools' must be a list", "tools")
        if not tools:
            tools = None
    if tools:
        try:
            tool_constraint = tool_call_constraint(tools, tool_choice)
        except InvalidRequestError as exc:
            raise bad_request(str(exc), exc.param) from None
        if tool_constraint is not None:
            constraint, output_type = tool_constraint, "tool_calls"
    want_logprobs = get_bool(body, "logprobs", False)
    top_logprobs = get_number(body, "top_logprobs", None, integer=True)
    params, given = sampling_params(
        body, default_max_tokens=default_max_tokens, constraint=constraint,
        max_tokens_key=("max_tokens", "max_completion_tokens"),
        logprobs=(top_logprobs or 0) if want_logprobs else None, speculation=speculation,
    )
    return Job("chat", model, params, stream=stream, messages=messages, tools=tools, tool_choice=tool_choice,
               max_tokens_given=given, include_usage=include_usage, logprobs=want_logprobs,
               output_type=output_type)


def parse_completions(body: dict[str, Any], default_max_tokens: int = 16,
                      speculation: SpeculationConfig = NO_SPECULATION) -> Job:
    model = get_str(body, "model")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if prompt is None:
        raise bad_request("'prompt' is required", "prompt")
    if not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string (one prompt per request on this server)", "prompt")
    if not prompt:
        raise bad_request("'prompt' must not be empty", "prompt")
    _check_n(body)
    stream, include_usage = _stream_flags(body)
    lp = get_number(body, "logprobs", None, integer=True)
    params, given = sampling_params(body, default_max_tokens=default_max_tokens, constraint=None, logprobs=lp,
                                    speculation=speculation)
    return Job("completions", model, params, stream=stream, prompt=prompt, max_tokens_given=given,
               include_usage=include_usage, logprobs=lp is not None, echo=get_bool(body, "echo", False))


# ───────────────────────────────────────────────────────────────────────────── responses
def usage(o: Outcome) -> dict[str, Any]:
    """OpenAI counts cached tokens inside prompt_tokens."""
    return {
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.output_tokens,
        "total_tokens": o.prompt_tokens + o.output_tokens,
        "prompt_tokens_details": {"cached_tokens": o.cached_tokens},
    }


def logprob_items(logprobs: list[Any], token_bytes: Any) -> list[dict[str, Any]]:
    """The engine's per-token log-probabilities as OpenAI chat ``logprobs.content`` items (token text, its
    UTF-8 bytes, log-probability, and the most likely alternatives)."""

    def item(token_id: int, logprob: float) -> dict[str, Any]:
        raw = token_bytes(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    return [{**item(lp.token_id, lp.logprob), "top_logprobs": [item(t, v) for t, v in lp.top]} for lp in logprobs]


def _chat_logprobs(items: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return {"content": items, "refusal": None} if items is not None else None


def _completion_logprobs(items: list[dict[str, Any]] | None, text_offset: int = 0) -> dict[str, Any] | None:
    """The legacy completions shape: parallel lists, ``top_logprobs`` as token -> logprob maps."""
    if items is None:
        return None
    offsets = []
    for it in items:
        offsets.append(text_offset)
        text_offset += len(it["token"])
    return {"tokens": [it["token"] for it in items], "token_logprobs": [it["logprob"] for it in items],
            "top_logprobs": [{t["token"]: t["logprob"] for t in it["top_logprobs"]} for it in items],
            "text_offset": offsets}


def chat_response(rid: str, model: str, o: Outcome, created: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": o.text}
    if o.tool_calls:
        message = {"role": "assistant", "content": None, "tool_calls": o.tool_calls}
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "system_fingerprint": "llmtrace",
        "choices": [{"index": 0, "message": message, "logprobs": _chat_logprobs(o.logprobs),
                     "finish_reason": o.finish_reason}],
        "usage": usage(o),
    }


def completion_response(rid: str, model: str, o: Outcome, created: int, prefix: str = "") -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "system_fingerprint": "llmtrace",
        "choices": [{"index": 0, "text": prefix + o.text, "logprobs": _completion_logprobs(o.logprobs, len(prefix)),
                     "finish_reason": o.finish_reason}],
        "usage": usage(o),
    }


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class OpenAIStream:
    """Turns engine deltas into ``chat.completion.chunk`` / ``text_completion`` SSE events."""

    def __init__(self, rid: str, model: str, job: Job) -> None:
        self.rid, self.model, self.job = rid, model, job
        self.created = int(time.time())
        self.chat = job.endpoint == "chat"
        self.text_offset = len(job.prompt) if job.echo and job.prompt else 0

    def _chunk(self, delta: dict[str, Any] | None, text: str | None = None,
               finish_reason: str | None = None, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": _chat_logprobs(logprobs),
                                      "finish_reason": finish_reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": _completion_logprobs(logprobs, self.text_offset),
                      "finish_reason": finish_reason}
            obj = "text_completion"
        out: dict[str, Any] = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                               "system_fingerprint": "llmtrace", "choices": [choice]}
        if self.job.include_usage:
            out["usage"] = None
        return out

    def opening(self) -> list[bytes]:
        if self.chat:
            return [sse(self._chunk({"role": "assistant", "content": ""}))]
        if self.job.echo and self.job.prompt:
            return [sse(self._chunk(None, self.job.prompt))]
        return []

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[bytes]:
        """A content chunk; ``logprobs`` are the items of the tokens this text came from."""
        if not delta:
            return []
        chunk = sse(self._chunk({"content": delta}, delta, logprobs=logprobs))
        if logprobs and not self.chat:
            self.text_offset += sum(len(it["token"]) for it in logprobs)
        return [chunk]

    def closing(self, o: Outcome) -> list[bytes]:
        out: list[bytes] = []
        if o.tool_calls and self.chat:
            calls = [{"index": i, **call} for i, call in enumerate(o.tool_calls)]
            out.append(sse(self._chunk({"tool_calls": calls})))
        out.append(sse(self._chunk({}, "", o.finish_reason)))
        if self.job.include_usage:
            final = self._chunk(None)
            final["choices"] = []
            final["usage"] = usage(o)
            out.append(sse(final))
        out.append(b"data: [DONE]\n\n")
        return out

    def error(self, message: str) -> list[bytes]:
        return [sse({"error": {"message": message, "type": "server_error", "param": None, "code": None}}),
                b"data: [DONE]\n\n"]
