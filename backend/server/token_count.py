"""``POST /v1/messages/count_tokens`` (Anthropic): the prompt's token count, chat template applied.

The count runs the same Intake steps a messages call runs (normalization, tool description, chat
template, tokenization), so it equals the input the messages call reports (``input_tokens`` plus
``cache_read_input_tokens``). Nothing is generated and no pass span is recorded: counting is not a pass.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmtrace.backend.model.chat_template import ChatTemplateError
from llmtrace.backend.server import anthropic_protocol as anth
from llmtrace.backend.server.errors import APIError, bad_request, render_error
from llmtrace.backend.server.intake import Intake
from llmtrace.backend.server.job import Job
from llmtrace.backend.server.request_body import decode_body, off_loop
from llmtrace.backend.server.service import OFF_LOOP_BYTES, OFF_LOOP_CHARS


def count_prompt_tokens(intake: Intake, job: Job) -> int:
    """Tokens of ``job``'s prompt as the engine would see it (Intake.run without its stage records)."""
    messages, _ = intake._normalize_messages(job.messages or [])
    prepared = intake._prepare_for_template(job, messages)
    try:
        text = intake._render(prepared, job.tools)
    except (ChatTemplateError, ValueError, TypeError) as exc:  # TypeError: a field of the wrong type
        raise bad_request(f"the chat template rejected the messages: {exc}", "messages") from None
    return len(intake.tokenizer.encode(text, add_special_tokens=True))


async def count_tokens(service: Any, request: Request) -> Response:
    try:
        raw = await request.body()
        if len(raw) > service.cfg.max_body_bytes:
            raise APIError(413, f"request body is larger than the {service.cfg.max_body_bytes // (1 << 20)} MiB limit")
        # like a messages call: parsing a big body and templating a long prompt run off the event loop
        big_body = len(raw) >= OFF_LOOP_BYTES
        body, error = await off_loop(service._workers, decode_body, raw) if big_body else decode_body(raw)
        if error is not None:
            raise error
        # count_tokens takes the messages request without max_tokens: parse it as one that asks for one token
        job = anth.parse_messages({**body, "max_tokens": 1, "stream": False})
        service.router.route(job.requested_model)
        if len(raw) >= OFF_LOOP_CHARS:
            n = await off_loop(service._workers, count_prompt_tokens, service.intake, job)
        else:
            n = count_prompt_tokens(service.intake, job)
    except APIError as err:
        r = render_error(err, "anthropic")
        return Response(r.body, r.status, headers=dict(r.headers))
    return JSONResponse({"input_tokens": n})

