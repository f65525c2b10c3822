"""The analyzers' core, below every other layer: the read API over the store (``query``), the finding and its one
layout (``finding``, ``finding_layout``, ``render``), the analyzer's shape (``base``: ``Analyzer``,
``SymptomAnalyzer``), flag rules as data (``flag_rule``), statistics (``stats``), the user's targets
(``targets``), the billed-token weighting (``billing``), merging findings of one cause (``merge``) and running
several analyzers at once (``concurrent_run``)."""
