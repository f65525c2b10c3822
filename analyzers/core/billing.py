"""What a request bills where no price is known (a self-hosted model), in prompt tokens: the one weighting the
gate's baseline (gate/baseline.py) and the cost analyzer (symptoms/cost_after_deploy.py) both compare by."""

from __future__ import annotations

# each answer token counts as OUTPUT_WEIGHT prompt tokens: the ratio of output to input list price at OpenAI and
# Anthropic (gpt-4o 10/2.5, gpt-4o-mini 0.60/0.15; Claude 15/3 is 5)
OUTPUT_WEIGHT = 4.0
BILLED_SQL = f"prompt_tokens + {OUTPUT_WEIGHT} * coalesce(output_tokens, 0)"
