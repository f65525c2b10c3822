"""The cache-loss model: why a prompt's prefix was recomputed instead of reused (``cache_loss``, the prompt
comparison it reads, ``prompt_compare`` and ``prefix_divergence``, the router's own account in ``routed_away``),
the findings it makes (``cache_findings``), the KV pool replay (``kv_replay``) and what a fix would save
(``what_if``, ``what_if_log``, with the prefill share of the first token from ``ttft_evidence``). It sits on the
core; the symptoms read it."""
