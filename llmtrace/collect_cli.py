"""``llmtrace collect``: the tracer's collector (tracer/cli/collect.py) with the adapters' conversation
reading installed, so foreign chat spans get ``loop.compaction`` as the middleware's own do (the tracer
cannot import the adapters; this command, above both, joins them)."""

from __future__ import annotations

import argparse

from llmtrace.tracer.cli import collect as _collect

add_arguments = _collect.add_arguments


def run(args: argparse.Namespace) -> int:
    from llmtrace.adapters.collect_conversations import WireConversations
    from llmtrace.tracer.collect import conversation_hook

    conversation_hook.install(WireConversations())
    return _collect.run(args)
