"""What kind of failure a failed call was, and the stage it belongs to, from what its spans say: the HTTP status,
``error.type`` (a status code, an exception's class, a provider's error type or code), the span's status message,
and the stage span that ended in error where a server traced one.

The same rules read our middleware's passes, the bundled server's and foreign spans through ``llmtrace collect``
(OpenLLMetry, LiteLLM and openai-v2 write ``<class 'openai.RateLimitError'>`` or ``litellm.Timeout``; providers
spell codes ``rate_limit_exceeded``, ``context_length_exceeded``, ``overloaded_error``). The first rule that
matches wins, so the specific (a context too long is a 400) comes before the general.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtrace.tracer.registry import stage_ids as S


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of failure: its id, how a person says it, the stage it belongs to, and what to do."""

    id: str
    title: str
    stage: str
    why: str
    next_check: str


CONTEXT = Kind("context_too_long", "the prompt was longer than the model's context", S.INTAKE_TOKENIZATION,
               "The provider counted more tokens than the model's context window holds and refused the call before "
               "any work.",
               "Count the prompt's tokens before sending (trim or summarise the history, drop retrieved passages, "
               "lower max_tokens), or route long prompts to a model with a longer context.")
MODEL = Kind("model_not_found", "unknown model", S.ARRIVAL_MODEL_ROUTING,
             "The server holds no model by the name the call asked for (a typo, a model the provider retired, or "
             "an alias this server was not given).",
             "Compare the model name with the server's /v1/models list; on `llmtrace serve`, map the name with "
             "--alias NAME=MODEL.")
NOT_FOUND = Kind("not_found", "not found (HTTP 404)", S.ARRIVAL_MODEL_ROUTING,
                 "The server found nothing at the path or under the name the call asked for.",
                 "Check the client's base_url (it usually ends in /v1) and the model name.")
RATE = Kind("rate_limited", "rate limited (HTTP 429)", S.ARRIVAL_ADMISSION,
            "The server refused the call for the rate or the number of calls in flight, not for what it asked.",
            "Send fewer calls at once (a client-side limit or queue), retry with backoff after the Retry-After "
            "the server gave, or raise the limit.")
OVERLOADED = Kind("overloaded", "server overloaded or unavailable", S.ARRIVAL_ADMISSION,
                  "The server turned the call away because it was full, starting or shutting down (503, 529).",
                  "Retry with backoff; add capacity (replicas) or lower the traffic at peak.")
AUTH = Kind("auth", "refused credentials (HTTP 401/403)", S.ARRIVAL_CONNECTION,
            "The server did not accept the call's credentials, or they do not allow this model.",
            "Check the API key the client reads (its environment variable), its project and its permissions.")
CONNECT_TIMEOUT = Kind("connect_timeout", "timed out connecting", S.ARRIVAL_CONNECTION,
                       "No connection to the server opened within the client's timeout.",
                       "Check the host and port are reachable from here (DNS, firewall, proxy); a pool timeout "
                       "means every pooled connection was busy: raise the pool size or lower the concurrency.")
TIMEOUT = Kind("timeout", "timed out waiting for the answer", S.ARRIVAL_STREAM_SETUP,
               "The connection opened but no answer began within the client's timeout: the server's queue, "
               "prefill or a long buffered answer took longer.",
               "Stream the answer (the first token comes long before the whole answer), raise the client's read "
               "timeout, or look at the server's queue wait.")
STREAM_TIMEOUT = Kind("stream_timeout", "timed out mid-answer", S.GEN_STREAMING,
                      "The answer began, then the gap before the next part was longer than the client's read "
                      "timeout.",
                      "Raise the client's read timeout, or look for what stalls the server mid-answer (preemption, "
                      "a proxy buffering the stream).")
CONNECT = Kind("connection_error", "could not connect", S.ARRIVAL_CONNECTION,
               "The connection was refused or could not be opened: nothing listened at that address, or DNS or "
               "TLS failed.",
               "Check the client's base_url and that the server is up and listening on that host and port.")
CUT = Kind("stream_cut", "answer cut off mid-way", S.GEN_STREAMING,
           "The connection closed before the answer's end marker: the server or a proxy dropped it mid-answer.",
           "Look at the server's and the proxy's logs at the traces' times (a restart, an idle timeout, a crash); "
           "retry the call.")
FILTERED = Kind("content_filter", "refused by a content filter", S.SAFETY_MODERATION,
                "The provider's content filter refused the prompt or the answer.",
                "Read the message for the category the filter named; change the prompt or ask the provider.")
SERVER = Kind("server_error", "server error (HTTP 5xx)", S.FORWARD_PREFILL,
              "The server failed while running the call; from the client the stage is hidden (the engine's "
              "work, where hosted providers fail), unless the server's own spans name it.",
              "Read the server's log at the traces' times, or trace the server (llmtrace serve, or its spans "
              "through llmtrace collect) to see the stage that failed.")
GATEWAY = Kind("bad_gateway", "a proxy could not reach the server (HTTP 502)", S.ARRIVAL_CONNECTION,
               "A gateway or proxy in front of the model server got no valid answer from it.",
               "Check that the model server behind the proxy is up, and the proxy's upstream address.")
INVALID = Kind("invalid_request", "rejected as invalid (HTTP 400)", S.INTAKE_CHAT_TEMPLATE,
               "The server refused the request's body before any work: a field it does not accept, or messages it "
               "cannot render.",
               "Read the message for the field it names and fix the request.")
OTHER_REFUSED = Kind("refused", "refused by the server", S.INTAKE_CHAT_TEMPLATE,
                     "The server answered with an error status the rules here do not name.",
                     "Read the message and the status code.")
BROKEN = Kind("broken_answer", "failed after the answer began", S.GEN_STREAMING,
              "The server answered, then the call failed while the answer was read.",
              "Read the message; retry the call.")
NO_ANSWER = Kind("no_answer", "failed before any answer", S.ARRIVAL_CONNECTION,
                 "The call failed in the client before the server answered.",
                 "Read the message and the exception's class.")

KINDS: tuple[Kind, ...] = (CONTEXT, MODEL, NOT_FOUND, RATE, OVERLOADED, AUTH, CONNECT_TIMEOUT, TIMEOUT,
                           STREAM_TIMEOUT, CONNECT, CUT, FILTERED, SERVER, GATEWAY, INVALID, OTHER_REFUSED, BROKEN,
                           NO_ANSWER)

_CONTEXT = re.compile(r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|input is "
                      r"too long|exceeds? the (model'?s )?(context|maximum)|contextwindowexceeded|reduce the length")
_MODEL = re.compile(r"model[_ ]not[_ ]found|unknown model|no such model|model\b.{0,80}\b(does not exist|not found|"
                    r"not available|is not served)|(does not exist|not found).{0,40}\bmodel")
_RATE = re.compile(r"rate[ _-]?limit|ratelimit|too many requests|quota|requests per (minute|second)")
_OVERLOADED = re.compile(r"overloaded|unavailable|over capacity|server_shutdown|shutting down")
_AUTH = re.compile(r"authenticat|permission|unauthori[sz]ed|forbidden|invalid api key|incorrect api key")
_CONNECT_TIMEOUT = re.compile(r"connecttimeout|pooltimeout|connect timeout|timed out connecting")
_TIMEOUT = re.compile(r"timeout|timed out|deadline exceeded")
_CONNECT = re.compile(r"connecterror|connection refused|connection error|apiconnectionerror|name or service not known|"
                      r"nodename nor servname|failed to establish|no route to host|ssl|certificate verify")
_CUT = re.compile(r"incomplete_stream|remoteprotocolerror|readerror|peer closed|incomplete chunked|"
                  r"connection reset|server disconnected|ended before|end marker|broken pipe|incomplete read")
_FILTERED = re.compile(r"content[ _]filter|content[ _]policy|content management policy|safety system")
_INVALID = re.compile(r"invalid_request|badrequest|bad request|unprocessable|invalid")
_SERVER = re.compile(r"internalservererror|internal server error|server_error|internal error|api_error")
# the field an invalid request names -> the stage that reads that field
_FIELD_STAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"max_tokens|max_completion_tokens|max_output_tokens|\bstop\b"), S.GEN_STOP),
    (re.compile(r"temperature|top_p|top_k|\bseed\b|min_p|logprobs"), S.GEN_SAMPLING),
    (re.compile(r"frequency_penalty|presence_penalty|repetition_penalty"), S.GEN_PENALTIES),
    (re.compile(r"response_format|json_schema|\bschema\b|grammar|\bregex\b"), S.GEN_CONSTRAINED),
    (re.compile(r"reasoning|thinking"), S.GEN_REASONING_BUDGET),
    (re.compile(r"\btools?\b|tool_choice|function"), S.LOOP_TOOL_DISPATCH),
)


@dataclass(frozen=True, slots=True)
class Failure:
    """What one failed call's spans say (either side's, the client's first where both have a value)."""

    error_type: str | None
    http_status: int | None
    message: str | None
    failed_stages: tuple[str, ...] = ()  # stage spans that ended in error under the pass, pipeline order


def http_status(value: object) -> int | None:
    """An HTTP status from a value as stored: an int, a float, or text holding the number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value) if 100 <= value < 600 else None
    m = re.fullmatch(r"\s*([1-5]\d\d)\s*", str(value))
    return int(m.group(1)) if m else None


def classify(f: Failure) -> tuple[Kind, str]:
    """(kind, stage): the kind's stage, unless the server's spans name the stage that failed."""
    kind = _kind(f)
    stage = kind.stage
    if f.failed_stages and kind in (SERVER, OTHER_REFUSED, INVALID, NO_ANSWER, BROKEN, MODEL, NOT_FOUND):
        stage = f.failed_stages[0]  # the server traced where it failed: that beats the rule's guess
    elif kind is INVALID:
        stage = _field_stage(f.message or "") or stage
    return kind, stage


def _kind(f: Failure) -> Kind:
    status = f.http_status if f.http_status is not None else http_status(f.error_type)
    text = " ".join(x for x in (f.error_type, f.message) if x).lower()
    if _CONTEXT.search(text) or status == 413:
        return CONTEXT
    if status == 404 or "notfounderror" in text or _MODEL.search(text):
        return MODEL if (_MODEL.search(text) or "model" in text) else NOT_FOUND
    if status == 429 or "ratelimiterror" in text or _RATE.search(text):
        return RATE
    if status in (503, 529) or _OVERLOADED.search(text):
        return OVERLOADED
    if status in (401, 403) or _AUTH.search(text):
        return AUTH
    if _FILTERED.search(text):
        return FILTERED
    answered = status is not None and status < 400  # the headers came: the failure came while reading the answer
    if _CONNECT_TIMEOUT.search(text):
        return CONNECT_TIMEOUT
    if _TIMEOUT.search(text) or status in (408, 504):
        return STREAM_TIMEOUT if answered else TIMEOUT
    if status == 502:
        return GATEWAY
    if status is not None and status >= 500 or _SERVER.search(text):
        return SERVER
    if _CUT.search(text):
        return CUT
    if _CONNECT.search(text) and not answered:
        return CONNECT
    if status is not None and status >= 400:
        return INVALID if status in (400, 422) or _INVALID.search(text) else OTHER_REFUSED
    if _INVALID.search(text) and not answered:
        return INVALID
    return BROKEN if answered else NO_ANSWER


def _field_stage(message: str) -> str | None:
    low = message.lower()
    return next((stage for pattern, stage in _FIELD_STAGES if pattern.search(low)), None)
