"""``POST /v1/messages/count_tokens`` (Anthropic): the prompt's token count, chat template applied.

The count runs the same Intake steps a messages call runs (normalization, tool description, chat
template, tokenization), so it equals the input the messages call reports (``input_tokens`` plus
``cache_read_input_tokens``). Nothing is generated and no pass span is recorded: counting is not a pass.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmtrace.backend.model.chat_template import ChatTemplateError
from llmtrace.backend.server import anthropic_protocol as anth
from llmtrace.backend.server.errors import APIError, bad_request, render_error
from llmtrace.backend.server.intake import Intake
from llmtrace.backend.server.job import Job


def count_prompt_tokens(intake: Intake, job: Job) -> int:
    """Tokens of ``job``'s prompt as the engine would see it (Intake.run without its stage records)."""
    messages, _ = intake._normalize_messages(job.messages or [])
    prepared = intake._prepare_for_template(job, messages)
    try:
        text = intake._render(prepared, job.tools)
    except (ChatTemplateError, ValueError) as exc:
        raise bad_request(f"the chat template rejected the messages: {exc}", "messages") from None
    return len(intake.tokenizer.encode(text, add_special_tokens=True))


async def count_tokens(service: Any, request: Request) -> Response:
    try:
        raw = await request.body()
        if len(raw) > service.cfg.max_body_bytes:
            raise APIError(413, f"request body is larger than the {service.cfg.max_body_bytes // (1 << 20)} MiB limit")
        body = _json_object(raw)
        # count_tokens takes the messages request without max_tokens: parse it as one that asks for one token
        job = anth.parse_messages({**body, "max_tokens": 1, "stream": False})
        service.router.route(job.requested_model)
        n = count_prompt_tokens(service.intake, job)
    except APIError as err:
        r = render_error(err, "anthropic")
        return Response(r.body, r.status, headers=dict(r.headers))
    return JSONResponse({"input_tokens": n})


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc.msg}") from None
    if not isinstance(body, dict):
        raise bad_request(f"request body must be a JSON object, got {type(body).__name__}")
    return body
