"""One module per symptom of the symptom registry (``tracer/registry/symptoms.py``): ``<symptom id>.py`` defines
the one class whose ``symptom`` is that id, and ``diagnose/catalog.py`` loads it by that name (no import list).
The other modules here are checks one symptom runs beside its own query, named for what they find:
``truncation`` (broken_json), ``failure_kinds`` (failed_calls), ``tool_repeats`` (agent_loops),
``untrusted_input`` (invisible_characters) and ``usage_invariants`` (cost_after_deploy)."""
