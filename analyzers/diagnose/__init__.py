"""Every symptom's analyzer and the ranked run over them: the table loaded from the symptom registry
(``catalog``), ``ANALYZERS`` and ``run_analyzers`` (``registry``) and ``llmtrace diagnose`` (``diagnose_cli``)."""
