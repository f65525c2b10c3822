"""The planted causes of ``benchmarks/diagnosis.py``: each case makes a few calls through an official SDK
wrapped by ``instrument()`` against ``llmtrace serve``, once with the cause planted and once as its clean
twin (the same app with the cause removed). Nothing here reaches into llmtrace: calls, prompts, flags.

The corpus differs on purpose from the unit tests and the demo: other wording, ids of other kinds (hex,
base64, e-mail, epoch, counters), fields at other positions (mid-tools, inside history, end of the system
prompt ahead of long examples), and Anthropic's Messages API as well as OpenAI's.

This module is the table; the apps live by kind in ``diagnosis_corpus_cache.py`` (cache breakers),
``_load.py`` (load and server flags), ``_output.py`` (generation, safety, detokenization) and ``_context.py``
(what goes into the context, loops, deploys) and ``_agents.py`` (agents whose tool calls are cut at the cap),
``_holdout.py`` (session 15's probes: credentials, a sliding window over a conversation), ``_probes35.py``
(hold-out probes of issue 35's kinds: stop strings in new places, intake folds over tool results and system
blocks, loops vs fan-out over suffix ids and same-status records),
what they share in ``diagnosis_corpus_common.py``.
"""

from __future__ import annotations

from diagnosis_corpus_agents import (
    cut_berth_call_carried_on,
    cut_berth_call_carried_on_anthropic,
    cut_tools_stuck_vs_fan_out,
    cut_tools_stuck_vs_fan_out_anthropic,
)
from diagnosis_corpus_cache import (
    anthropic_clock,
    clock_local_full,
    clock_top,
    counter_in_history,
    distinct_personas,
    epoch_before_examples,
    hex_mid_system,
    notes_block_top,
    per_customer_top,
    profile_block_top_anthropic,
    short_prompts,
    shuffled_examples,
    tenant_email,
    token_in_history,
    uuid_in_tools,
)
from diagnosis_corpus_common import Case, Ctx
from diagnosis_corpus_context import (
    entry_labelled_articles,
    entry_labelled_passages,
    faq_labelled_faqs_anthropic,
    faq_labelled_passages_anthropic,
    injected_tool_result,
    invisible_in_prompt,
    longer_system_prompt,
    nbsp_in_tools_text,
    rag_lines_in_system,
    rag_paragraphs,
    raised_max_tokens,
    stuck_lookup_vs_fan_out,
    stuck_tool_loop,
    summary_drops_ids,
    summary_drops_ids_inferred,
)
from diagnosis_corpus_ends import ENDS_CASES
from diagnosis_corpus_harm import HARM_CASES
from diagnosis_corpus_holdout import HOLDOUT_CASES
from diagnosis_corpus_load import (
    batch_greedy,
    connection_burst,
    foreign_template,
    many_prefixes,
    no_max_tokens_structured,
    queue_burst,
    shared_prefix_burst,
    shed_burst,
    spec_under_load,
    spec_under_load_anthropic,
    spec_under_load_shapes,
)
from diagnosis_corpus_no_progress import NO_PROGRESS_CASES
from diagnosis_corpus_output import (
    anthropic_max_tokens,
    anthropic_stream_filtered,
    json_in_words_cut,
    non_latin_stream,
    non_latin_unary,
    penalty_on_schema,
    stop_marker_anthropic,
    stop_marker_stream,
    streamed_then_filtered,
    tool_call_cut,
    unseeded_sampling,
)
from diagnosis_corpus_phrasings import PHRASING_CASES
from diagnosis_corpus_probes35 import PROBE_CASES
from diagnosis_corpus_variants import VARIANT_CASES

__all__ = ["CASES", "Case", "Ctx"]

CACHE = ("cache.prefix_match", "intake.system_prompt")
CASES: tuple[Case, ...] = (
    Case("clock_top_of_system", clock_top, CACHE),
    Case("hex_tag_mid_system", hex_mid_system, CACHE),
    Case("uuid_inside_tool_list", uuid_in_tools, ("cache.prefix_match",)),
    Case("epoch_ahead_of_examples", epoch_before_examples, CACHE),
    Case("per_customer_id_top", per_customer_top, CACHE),
    Case("per_tenant_email_top", tenant_email, CACHE),
    Case("shuffled_few_shot", shuffled_examples, ("cache.prefix_match", "intake.context_ordering")),
    Case("counter_inside_history", counter_in_history, ("cache.prefix_match",)),
    Case("base64_token_in_history", token_in_history, ("cache.prefix_match",)),
    Case("anthropic_clock_system", anthropic_clock, CACHE),
    Case("counter_on_distinct_personas", distinct_personas, CACHE),
    Case("prompts_under_min_prefix", short_prompts, ("cache.prefix_match",)),
    Case("full_capture_local_clock", clock_local_full, CACHE, capture="full"),
    Case("round_robin_replicas", shared_prefix_burst, ("arrival.replica_selection",), "round_robin", "prefix_aware"),
    Case("small_kv_pool_eviction", many_prefixes, ("cache.eviction",), "small_pool", "default"),
    Case("single_slot_queue", queue_burst, ("arrival.admission",), "one_slot", "default"),
    # the twin runs batch-invariant: the same prompt in two bursts otherwise shows (real) batch-dependent greedy
    # answers on the default kernels, another cause than the one planted here
    Case("speculation_under_load", spec_under_load, ("gen.speculation",), "smol_speculative", "smol_invariant",
         model="smol"),
    Case("shed_under_burst", shed_burst, ("arrival.admission",), "tiny_queue", "default"),
    Case("batch_dependent_greedy", batch_greedy, ("forward.batching",), "smol", "smol_invariant", model="smol"),
    Case("foreign_chat_template", foreign_template, ("intake.chat_template",), "foreign_template", "default"),
    Case("unseeded_sampling", unseeded_sampling, ("gen.sampling",), "smol", model="smol"),
    Case("repetition_penalty_on_schema", penalty_on_schema, ("gen.penalties",)),
    Case("json_in_words_cut", json_in_words_cut, ("gen.stop", "safety.stop_reason")),
    Case("json_in_words_cut_full", json_in_words_cut, ("gen.stop", "safety.stop_reason"), capture="full"),
    Case("tool_call_cut_mid_args", tool_call_cut, ("gen.stop", "safety.stop_reason")),
    Case("anthropic_max_tokens", anthropic_max_tokens, ("gen.stop", "safety.stop_reason")),
    Case("zero_width_in_system", invisible_in_prompt, ("intake.normalization",)),
    Case("nbsp_coming_and_going", nbsp_in_tools_text, ("intake.normalization",)),
    Case("injection_in_tool_output", injected_tool_result, ("safety.injection",), capture="full"),
    Case("stuck_tool_loop", stuck_tool_loop, ("loop.budget", "loop.tool_dispatch")),
    Case("stuck_lookup_vs_fan_out", stuck_lookup_vs_fan_out, ("loop.budget", "loop.tool_dispatch")),
    Case("rag_paragraphs_no_ids", rag_paragraphs, ("intake.evidence_formatting",)),
    Case("rag_lines_in_system_anthropic", rag_lines_in_system, ("intake.evidence_formatting",)),
    Case("summary_drops_ids_session", summary_drops_ids, ("loop.compaction",)),
    Case("summary_drops_ids_inferred", summary_drops_ids_inferred, ("loop.compaction",)),
    Case("moderation_lags_stream", streamed_then_filtered, ("safety.moderation",), "moderated", "default"),
    Case("moderation_lags_anthropic_stream", anthropic_stream_filtered, ("safety.moderation",), "moderated",
         "default"),
    Case("no_holdback_non_latin_stream", non_latin_stream, ("gen.detokenization",), "no_holdback", "default"),
    Case("no_holdback_non_latin_unary", non_latin_unary, ("gen.detokenization",), "no_holdback", "default"),
    Case("ngram_speculation_under_load", spec_under_load_shapes, ("gen.speculation",), "speculative", "default"),
    Case("ngram_speculation_under_load_anthropic", spec_under_load_anthropic, ("gen.speculation",), "speculative",
         "default"),
    Case("short_stop_window_stream", stop_marker_stream, ("gen.detokenization",), "short_stop_window", "default"),
    Case("short_stop_window_anthropic", stop_marker_anthropic, ("gen.detokenization",), "short_stop_window",
         "default"),
    Case("deploy_raised_max_tokens", raised_max_tokens, ("meters.cache_accounting", "gen.stop")),
    Case("deploy_longer_system_prompt", longer_system_prompt, ("meters.cache_accounting", "intake.system_prompt")),
    # a changing block (catalogue matches, a member profile) ahead of long fixed rules; the twin: after them
    Case("catalogue_notes_top_of_system", notes_block_top, CACHE),
    Case("member_profile_top_anthropic", profile_block_top_anthropic, CACHE),
    # server flags the app never set: a short default max_tokens, a connection limit, one sequence per engine
    Case("server_default_cuts_structured", no_max_tokens_structured, ("gen.stop", "safety.stop_reason"),
         "short_default", "default"),
    Case("connection_limit_sheds", connection_burst, ("arrival.admission",), "conn_limit", "default"),
    Case("one_sequence_engine_queue", connection_burst, ("arrival.admission",), "one_seq", "default"),
    # passages pasted without labels; the twin labels them by index ('Entry 2 — ', 'FAQ 12) ')
    Case("unlabelled_vs_entry_labels", entry_labelled_passages, ("intake.evidence_formatting",)),
    Case("unlabelled_vs_faq_labels_anthropic", faq_labelled_passages_anthropic, ("intake.evidence_formatting",)),
    # the same two under a line naming the material ('Help centre articles:', 'Relevant FAQs:')
    Case("unlabelled_vs_entry_labels_cued", entry_labelled_articles, ("intake.evidence_formatting",)),
    Case("unlabelled_vs_faq_labels_cued_anthropic", faq_labelled_faqs_anthropic, ("intake.evidence_formatting",)),
    # tools= with a six-token cap: every tool call cut. Stuck on one lookup (the twin fans out, one session)...
    Case("cut_tools_stuck_vs_fan_out", cut_tools_stuck_vs_fan_out, ("loop.budget", "loop.tool_dispatch")),
    Case("cut_tools_stuck_vs_fan_out_anthropic", cut_tools_stuck_vs_fan_out_anthropic,
         ("loop.budget", "loop.tool_dispatch")),
    # ...or the cut call written back and gone on with (the twin: room for the call to finish)
    Case("cut_berth_call_carried_on", cut_berth_call_carried_on, ("gen.stop", "safety.stop_reason")),
    Case("cut_berth_call_carried_on_anthropic", cut_berth_call_carried_on_anthropic,
         ("gen.stop", "safety.stop_reason")),
) + VARIANT_CASES + PHRASING_CASES + HOLDOUT_CASES + ENDS_CASES  # other SDKs, positions, flags: _variants.py,
# _phrasings.py, session 15's hold-out probes: _holdout.py, and issue 35's early ends and intake rewrites: _ends.py

# issue 35's loops vs fan-out, a batch-invariant server's bursts, greedy answers by the prefix-cache path
CASES = CASES + HARM_CASES  # (diagnosis_corpus_harm.py)
# and loops that make no progress: the same result, error or nothing again whatever was asked (_no_progress.py)
CASES = CASES + NO_PROGRESS_CASES
# and session 35b's hold-out probes of issue 35's kinds: new places for stop strings, intake folds, loops (_probes35.py)
CASES = CASES + PROBE_CASES
