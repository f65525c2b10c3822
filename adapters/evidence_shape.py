"""Retrieved-passage shape read off the wire: the rule lives in ``llmtrace.tracer.record.evidence_shape``
(one rule for the middleware and the collector), and this name is that module, not a copy of it: patching
or reading ``adapters.evidence_shape.<name>`` reaches the rule itself.
"""

from __future__ import annotations

import sys

from llmtrace.tracer.record import evidence_shape as _rule
from llmtrace.tracer.record.evidence_shape import MIN_CHARS, EvidenceShape, shape, values

__all__ = ["MIN_CHARS", "EvidenceShape", "shape", "values"]

sys.modules[__name__] = _rule  # the import system hands out what sys.modules holds after this body runs
