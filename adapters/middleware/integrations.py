"""Frameworks that hold an SDK client inside: LangChain's ``ChatOpenAI`` / ``ChatAnthropic`` and LiteLLM.

``instrument()`` reaches through them to the HTTP clients that actually talk to the provider, so the
same transport records the calls; nothing here imports the frameworks (they are recognised by module).

- ``langchain_openai.ChatOpenAI`` (and ``AzureChatOpenAI``): its ``root_client`` / ``root_async_client``
  (OpenAI SDK clients; LangChain may share one HTTP client between models of the same base URL).
- ``langchain_anthropic.ChatAnthropic``: its ``_client`` / ``_async_client`` (Anthropic SDK clients, made
  on first use and then kept).
- ``litellm`` (the module): its ``client_session`` / ``aclient_session``, the HTTP clients LiteLLM hands to
  the OpenAI SDK for OpenAI-compatible providers (``openai/...``, ``hosted_vllm/...``, ...); created when
  the app has not set its own, and LiteLLM's cache of SDK clients is emptied so new ones pick them up.
  Providers LiteLLM calls with its own HTTP handler (Anthropic, Bedrock, ...) are not reached this way.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

_LANGCHAIN_OPENAI = ("root_client", "root_async_client")
_LANGCHAIN_ANTHROPIC = ("_client", "_async_client")


def framework_of(obj: object) -> str | None:
    if isinstance(obj, types.ModuleType):
        return "litellm" if obj.__name__ == "litellm" else None
    root = type(obj).__module__.split(".", 1)[0]
    if root in ("langchain_openai", "langchain_anthropic"):
        return root
    return None


def inner_clients(obj: object, framework: str) -> list[tuple[Any, str | None]]:
    """(SDK or HTTP client, provider) pairs that ``obj`` sends its calls through."""
    if framework == "langchain_openai":
        return [(getattr(obj, a), "openai") for a in _LANGCHAIN_OPENAI if getattr(obj, a, None) is not None]
    if framework == "langchain_anthropic":
        return [(getattr(obj, a), "anthropic") for a in _LANGCHAIN_ANTHROPIC if getattr(obj, a, None) is not None]
    if framework == "litellm":
        sessions = (getattr(obj, "client_session", None), getattr(obj, "aclient_session", None))
        return [(c, None) for c in sessions if c is not None]
    return []


def prepare_litellm(litellm: Any, make_sync: Callable[[], Any], make_async: Callable[[], Any]) -> None:
    """Give LiteLLM HTTP clients of its own to hand to the SDKs, and drop the SDK clients made before."""
    if litellm.client_session is None:
        litellm.client_session = make_sync()
    if litellm.aclient_session is None:
        litellm.aclient_session = make_async()
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    flush = getattr(cache, "flush_cache", None)
    if callable(flush):
        flush()


WHAT_TO_PASS = (
    "an openai or anthropic client (sync or async), an httpx Client/AsyncClient, a LangChain ChatOpenAI or "
    "ChatAnthropic, or the litellm module"
)
