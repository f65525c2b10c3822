"""The in-app recording path: spans, capture mode, exporter, health counters. Reading prompt text (the
classifiers both the middleware and the collector use) is ``llmtrace.tracer.reading``."""
