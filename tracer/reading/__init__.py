"""Reading prompts, answers and conversations: what the client middleware and the collector both need.

Below both (it imports ``record`` for the capture mode and ``registry`` for the names, nothing above), so
the middleware and ``llmtrace collect`` read a prompt the same way:

- prompt text: ``prompt_segments`` (segments, fields, block pieces), ``evidence_shape`` with
  ``evidence_run`` / ``evidence_json`` / ``passage_recurrence`` (passages and how they are laid out),
  ``untrusted_text`` and ``orthography`` (injection phrases, unwritten characters), ``char_folds``
  (what a normalization changed), ``textscan`` and ``volatile`` (hidden characters, volatile fields),
  ``digest_cache``;
- answers and tools: ``stop_context`` (how an answer ended), ``assistant_turn`` (an answer written back
  into the next prompt), ``tool_digest``;
- conversations: ``segments`` (a request's messages as prompt segments), ``messages`` (their chained
  digests and tool calls), ``sessions`` (the conversation tracker), ``divergence`` (where a prompt parted
  from its conversation's last), ``facts`` (what a rewritten history lost), ``tokens`` (a count from
  characters), ``conversations`` (one tracker per service, for the collector);
- ``memory``: what reading remembers across prompts in this process, in one object.
"""
