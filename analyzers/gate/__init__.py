"""``llmtrace check``, the CI gate: a deploy's passes against a baseline (``baseline``), the intervals its
verdict rests on (``check_interval``), the verdict's formats (``check_report``) and the command (``check_cli``).
``check --html`` joins the report's page above both, in ``llmtrace/check_cmd.py``."""
