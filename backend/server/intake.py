"""Server-side Intake: Unicode normalization, chat templating and tokenization, each recorded as its stage.

Tokenization also records the hash chain over full KV blocks of the prompt (each hash covers the previous
one), so where two prompts part can be found later without keeping their text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmtrace.backend.engine.prefix_cache import block_hashes_hex
from llmtrace.backend.generation.tool_calls import describe_tools, tool_call_message_content
from llmtrace.backend.model.chat_template import ChatTemplateError
from llmtrace.backend.server.errors import APIError, bad_request
from llmtrace.backend.server.job import Job
from llmtrace.backend.server.normalization import NormalizationCounts, NormalizationPolicy
from llmtrace.tracer import capture
from llmtrace.tracer import recording as rec
from llmtrace.tracer.reading import char_folds, prompt_segments
from llmtrace.tracer.registry import names as N
from llmtrace.tracer.registry import stage_ids as S

MAX_RENDERED_SEGMENTS = 48  # past this many messages, segments are hashed from the message contents
# NFC/NFKC composition shrinks text at most 4 characters to 1 (Greek omega with three marks): the factor
# that keeps the length-only token floor below the true count for any non-ASCII text.
_COMPOSITION_SHRINK = 4


@dataclass(frozen=True, slots=True)
class IntakeResult:
    prompt_text: str
    token_ids: list[int]
    block_hashes: list[str]
    prefix_text: str = ""  # what completions with echo=true put before the output


# Conversations a template is tried on to tell whether it renders as the model's own: with and without a
# system turn (templates add a default one), several turns, an empty message, and tool traffic.
_PROBES: tuple[tuple[dict[str, Any], ...], ...] = (
    ({"role": "user", "content": "Hello there."},),
    ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}),
    ({"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c\n  d "}),
    ({"role": "user", "content": "x"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "y"}),
    ({"role": "user", "content": "weather?"},
     {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                          "function": {"name": "f", "arguments": "{}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}),
)


def renders_alike(tokenizer: Any, template: str, model_template: str) -> bool:
    """True when ``template`` renders every probe conversation (with and without the generation prompt)
    exactly as ``model_template`` does."""
    if template == model_template:
        return True
    for probe in _PROBES:
        for gen in (True, False):
            try:
                ours = tokenizer.apply_chat_template(list(probe), add_generation_prompt=gen,
                                                     template_override=template)
            except (ChatTemplateError, ValueError, TypeError):
                return False
            try:
                theirs = tokenizer.apply_chat_template(list(probe), add_generation_prompt=gen,
                                                       template_override=model_template)
            except (ChatTemplateError, ValueError, TypeError):
                theirs = None
            if ours != theirs:
                return False
    return True


def block_hash_chain(token_ids: list[int], block_size: int) -> list[str]:
    """Hex hashes of the prompt's full blocks, the same keys the engine's prefix cache uses (each covers its
    parent's hash and the block's tokens), so a trace's hashes line up with the cache's ``prefix.key``."""
    return block_hashes_hex(token_ids, block_size)


class Intake:
    """Runs the three server-side Intake stages for one job and returns the prompt's token ids."""

    def __init__(self, tokenizer: Any, policy: NormalizationPolicy, *, block_size: int,
                 template_override: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.block_size = block_size
        self.model_template: str = tokenizer.chat_template
        # A template file that renders every probe conversation exactly as the model's own does (the
        # model's template saved by an editor with a newline at the end, reformatted whitespace control) is
        # the model's template: recording it as foreign would blame intake.chat_template for nothing.
        same = template_override is None or renders_alike(tokenizer, template_override, self.model_template)
        self.template = self.model_template if same else str(template_override)
        self.template_matches = same
        self.template_hash = capture.hash_text(self.template)
        self._template_has_tools = "tools" in self.template
        self.special_ids: frozenset[int] = frozenset(getattr(tokenizer, "special_ids", ()))
        # No token stands for more bytes than this, so a text of B bytes is at least B / this many tokens.
        self.max_token_bytes = max((len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)), default=1)

    # ───────────────────────────────────────────────────────────── size before work
    @staticmethod
    def prompt_texts(job: Job) -> list[str]:
        """The strings that make up the prompt (message contents, text parts, or the completions prompt)."""
        return [job.prompt or ""] if job.messages is None else _message_texts(job.messages)

    def token_floor(self, texts: list[str]) -> int:
        """A lower bound on the prompt's tokens from string lengths alone (O(number of strings), no scan):
        the template and normalization may add text but never shrink it past ``_COMPOSITION_SHRINK``, and
        ASCII text (``str.isascii`` is O(1)) is left as it is by every policy."""
        total = 0.0
        for t in texts:
            total += len(t) if t.isascii() else len(t) / _COMPOSITION_SHRINK
        return int(total // self.max_token_bytes)

    # ───────────────────────────────────────────────────────────── normalization
    def _normalize(self, text: str) -> tuple[str, NormalizationCounts]:
        # ASCII holds no invisible, NBSP or confusable characters and every normal form leaves it as it is;
        # skipping the per-character scans saves most of the intake time of a large English prompt.
        if text.isascii():
            return text, NormalizationCounts()
        return self.policy.apply(text)

    def _normalize_messages(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], NormalizationCounts]:
        total = NormalizationCounts()
        out = []
        for m in messages:
            msg = dict(m)
            content = msg.get("content")
            if isinstance(content, str):
                msg["content"], c = self._normalize(content)
                total.add(c)
            elif isinstance(content, list):
                parts = []
                for part in content:
                    if part.get("type") == "text":
                        text, c = self._normalize(part.get("text", ""))
                        total.add(c)
                        part = {**part, "text": text}
                    parts.append(part)
                msg["content"] = parts
            out.append(msg)
        return out, total

    def _stage_normalization(self, counts: NormalizationCounts, pass_span: rec.PassSpan, t0: int) -> None:
        rec.record_stage(S.INTAKE_NORMALIZATION, start_ns=t0, end_ns=rec.now_ns(), parent=pass_span, values={
            N.NORMALIZATION_FORM: self.policy.label,
            N.NORMALIZATION_STRIP: self.policy.strip_invisible,
            N.NORMALIZATION_CHARS_CHANGED: counts.chars_changed,
            N.NORMALIZATION_INVISIBLE_CHARS: counts.invisible_chars,
            N.NORMALIZATION_NBSP: counts.nbsp,
            N.NORMALIZATION_CONFUSABLES: counts.confusables,
            # by class, so a fold that changed what the text says (x² -> x2) is told from one that changed only
            # how it is drawn (ＡＢＣ -> ABC)
            N.NORMALIZATION_CHANGED_CLASSES: char_folds.encode(counts.classes) or None,
            N.NORMALIZATION_MEANING_CHARS: char_folds.meaning_chars(counts.classes),
        })

    # ───────────────────────────────────────────────────────────── templating
    def _prepare_for_template(self, job: Job, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Flatten content parts, write earlier tool calls back as the JSON the model produces, and show
        the tools in the system prompt when the template has no tool support of its own."""
        prepared: list[dict[str, Any]] = []
        for m in messages:
            msg = dict(m)
            content = msg.get("content")
            if isinstance(content, list):
                msg["content"] = "".join(p.get("text", "") for p in content if p.get("type") == "text")
            elif content is None:
                msg["content"] = ""
            calls = msg.get("tool_calls")
            if calls is not None:
                _check_tool_calls(calls, len(prepared))
            if calls and not msg["content"]:
                try:
                    msg["content"] = tool_call_message_content(calls)
                except (ValueError, RecursionError):  # arguments JSON nested too deep or with huge integers
                    raise bad_request(f"messages[{len(prepared)}].tool_calls: arguments are not JSON this server "
                                      "can read", f"messages[{len(prepared)}].tool_calls") from None
            prepared.append(msg)
        if job.tools and job.output_type == "tool_calls" and not self._template_has_tools:
            text = describe_tools(job.tools)
            if prepared and prepared[0]["role"] == "system":
                prepared[0] = {**prepared[0], "content": prepared[0]["content"] + "\n\n" + text}
            else:
                prepared.insert(0, {"role": "system", "content": text})
        return prepared

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                add_generation_prompt: bool = True) -> str:
        tok = self.tokenizer
        return tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                       tools=tools if self._template_has_tools else None,
                                       template_override=None if self.template_matches else self.template)

    def _segments(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                  rendered: str) -> list[dict[str, Any]]:
        """Each message's share of the rendered prompt (render prefixes, take the growth), hashed."""
        segments: list[dict[str, Any]] = []
        prev = ""
        if len(messages) > MAX_RENDERED_SEGMENTS:  # rendering every prefix is quadratic in the turns
            return [self._segment(_kind(m, i), str(m.get("content", ""))) for i, m in enumerate(messages)]
        try:
            for i, m in enumerate(messages):
                cur = self._render(messages[: i + 1], tools, add_generation_prompt=False)
                piece = cur[len(prev):] if cur.startswith(prev) else cur
                segments.append(self._segment(_kind(m, i), piece, lead=_lead(piece, m.get("content"))))
                prev = cur
            if rendered.startswith(prev) and len(rendered) > len(prev):
                segments.append(self._segment("generation_prompt", rendered[len(prev):]))
        except (ChatTemplateError, ValueError, TypeError):
            # Some templates refuse partial conversations; fall back to hashing each message's content.
            segments = [self._segment(_kind(m, i), str(m.get("content", ""))) for i, m in enumerate(messages)]
        return segments

    def _check_floor(self, text_bytes: int, limit: int, job: Job) -> None:
        floor = text_bytes // self.max_token_bytes
        if floor >= limit:
            raise context_exceeded(job, limit, floor, at_least=True)

    @staticmethod
    def _segment(kind: str, text: str, lead: int = 0) -> dict[str, Any]:
        # Scrubbed first, so chars, hashes and (full capture) text all describe the same string. The record
        # the middleware and the collector write (hashes, chunk chain, a long segment's pieces) and the
        # volatile-looking values located in it: a store of this server alone (an app that calls it without
        # instrument()) can then say which value or block moved, as an instrumented app's store can.
        text = capture.scrub(text)
        (record,) = prompt_segments.segment_records([(kind, text)], scrubbed=True)
        found = prompt_segments.fields(text)
        if found:
            record["fields"] = found
        if lead > 0:  # the template's own text ahead of the message's: offsets are told from the message's start
            record["lead"] = lead
        if capture.mode() == "full":
            record["text"] = text
        return record

    # ───────────────────────────────────────────────────────────── the three stages
    def run(self, job: Job, pass_span: rec.PassSpan, max_model_len: int | None = None) -> IntakeResult:
        """The three stages; with ``max_model_len``, a prompt whose normalized UTF-8 bytes already say it
        cannot fit is refused before templating and tokenization (the costly part of a huge prompt)."""
        t0 = rec.now_ns()
        if job.messages is not None:
            messages, counts = self._normalize_messages(job.messages)
            self._stage_normalization(counts, pass_span, t0)
            if max_model_len is not None:
                self._check_floor(sum(len(t.encode("utf-8", "surrogatepass")) for t in _message_texts(messages)),
                                  max_model_len, job)
            t1 = rec.now_ns()
            prepared = self._prepare_for_template(job, messages)
            try:
                text = self._render(prepared, job.tools)
            except (ChatTemplateError, ValueError, TypeError) as exc:  # TypeError: a field of the wrong type
                raise bad_request(f"the chat template rejected the messages: {exc}", "messages") from None
            segments = self._segments(prepared, job.tools, text)
            rec.record_stage(S.INTAKE_CHAT_TEMPLATE, start_ns=t1, end_ns=rec.now_ns(), parent=pass_span, values={
                N.TEMPLATE_HASH: self.template_hash,
                N.TEMPLATE_MATCHES_MODEL: self.template_matches,
                N.TEMPLATE_RENDERED_CHARS: len(text),
                N.TEMPLATE_SEGMENT_HASHES: [s["hash"] for s in segments],
            })
            prefix = ""
        else:
            text, counts = self._normalize(job.prompt or "")
            self._stage_normalization(counts, pass_span, t0)
            if max_model_len is not None:
                self._check_floor(len(text.encode("utf-8", "surrogatepass")), max_model_len, job)
            t1 = rec.now_ns()
            # Completions take the prompt as given: no template is applied, and the stage says so.
            segments = [self._segment("prompt", text)]
            rec.record_stage(S.INTAKE_CHAT_TEMPLATE, start_ns=t1, end_ns=rec.now_ns(), parent=pass_span, values={
                N.TEMPLATE_HASH: "none",
                N.TEMPLATE_RENDERED_CHARS: len(text),
                N.TEMPLATE_SEGMENT_HASHES: [s["hash"] for s in segments],
            })
            prefix = text if job.echo else ""
        t2 = rec.now_ns()
        ids = list(self.tokenizer.encode(text, add_special_tokens=True))
        if not ids:
            raise bad_request("the prompt is empty after templating and tokenization", "messages")
        hashes = block_hash_chain(ids, self.block_size)
        rec.record_stage(S.INTAKE_TOKENIZATION, start_ns=t2, end_ns=rec.now_ns(), parent=pass_span, values={
            N.GEN_AI_USAGE_INPUT_TOKENS: len(ids),
            N.TOKENIZATION_CHARS_PER_TOKEN: round(len(text) / len(ids), 3),
            N.TOKENIZATION_SPECIAL_TOKENS: sum(1 for t in ids if t in self.special_ids),
            N.TOKENIZATION_BLOCK_HASHES: hashes,
        })
        if capture.mode() != "none":
            pass_span.set(N.PROMPT_HASH, capture.hash_text(text))
            pass_span.set(N.PROMPT_SEGMENTS, json.dumps(segments, separators=(",", ":")))
            kept = capture.keep_text(text)
            if kept is not None:
                pass_span.set(N.PROMPT_TEXT, kept)
        return IntakeResult(text, ids, hashes, prefix)


def _check_tool_calls(calls: Any, index: int) -> None:
    """An assistant message's earlier tool calls: a list of {"function": {"name": str, "arguments": str or
    object}} (OpenAI's shape, which the Anthropic tool_use blocks are converted to)."""
    where = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request(f"{where} must be a list of tool calls, got {type(calls).__name__}", where)
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise bad_request(f"{where}[{i}] must be an object with a 'function' object", where)
        if not isinstance(fn.get("name", ""), str):
            raise bad_request(f"{where}[{i}].function.name must be a string", where)
        if not isinstance(fn.get("arguments", "{}"), (str, dict)):
            raise bad_request(f"{where}[{i}].function.arguments must be a JSON string", where)


def _message_texts(messages: list[dict[str, Any]]) -> list[str]:
    texts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return texts


def context_exceeded(job: Job, limit: int, tokens: int, *, at_least: bool = False) -> APIError:
    """The 400 a prompt past the context gets (``at_least``: counted from its length, not tokenized)."""
    has = f"at least {tokens} tokens (judged from its length)" if at_least else \
        f"{tokens} tokens (after the chat template)"
    return APIError(
        400,
        f"This model's maximum context length is {limit} tokens, but the prompt has {has}. Shorten the messages.",
        param="messages" if job.messages is not None else "prompt", code="context_length_exceeded",
    )


def _lead(piece: str, content: object) -> int:
    """Chars of chat-template text ahead of a message's own text in its rendered piece (0 when the content is
    not plain text, or scrubbing or the template changed it)."""
    return max(piece.find(content), 0) if isinstance(content, str) and content else 0


def _kind(message: dict[str, Any], index: int) -> str:
    role = message.get("role", "user")
    if role == "system":
        return "system" if index == 0 else "system_late"
    if role == "tool":
        return "tool_result"
    return role
