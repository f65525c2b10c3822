"""What reading remembers across prompts in this process, in one object: ``memory``.

Three things change how a later prompt is read, so they are state, not caches: the conversations the
middleware has seen (``sessions.Tracker``), the last prompt per template (``divergence.PromptHistory``,
where a prompt parted from the one before) and the company each passage was last seen in
(``passage_recurrence.PassageCompany``, retrieved passages from pasted text). All of it is hashes and
counts, bounded. ``memory.clear()`` forgets it all (the tests start each case from nothing); a new
``llmtrace.init`` forgets the conversations (a new store starts with none). It is one part of the process's
``runtime`` (``tracer/record/runtime.py``): ``runtime.clear()`` forgets it with the rest.

The digest caches of ``prompt_segments``, ``evidence_shape`` and ``untrusted_text`` only save work: a
prompt reads the same with them or without, so they stay beside the code they speed up. The collector
keeps its own conversations per service (conversations.py), owned by its mapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtrace.tracer.reading.divergence import PromptHistory
from llmtrace.tracer.reading.passage_recurrence import PassageCompany
from llmtrace.tracer.reading.sessions import Tracker
from llmtrace.tracer.record import lifecycle
from llmtrace.tracer.record.runtime import runtime


@dataclass(slots=True)
class Memory:
    conversations: Tracker = field(default_factory=Tracker)
    prompts: PromptHistory = field(default_factory=PromptHistory)
    passages: PassageCompany = field(default_factory=PassageCompany)

    def clear(self) -> None:
        self.conversations.clear()
        self.prompts.clear()
        self.passages.clear()


memory = runtime.attach("reading", Memory())  # the process's runtime clears it with the rest (runtime.py)
lifecycle.on_init(memory.conversations.clear)  # a new set-up (a new store) starts with no conversation in memory
