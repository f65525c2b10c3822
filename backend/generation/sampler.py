"""Temperature, top-k, top-p and min-p sampling of one row of logits, with a per-request seed.

Every sequence is sampled on its own row (never a batch-wide reduction), and the random draw for output
position ``n`` comes from a generator seeded with ``(seed, n)``. So a seeded request picks the same tokens
whatever else is in the batch, and with or without speculation (which samples several positions at once).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from llmtrace.backend.generation.params import SamplingParams

# Below this a temperature is numerically greedy; we say so in the effective values rather than divide by it.
MIN_TEMPERATURE = 1e-4
_MASK64 = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class EffectiveSampling:
    """The sampling values actually used, after clamping (what the span reports next to the request)."""

    temperature: float
    top_k: int  # 0: off
    top_p: float
    min_p: float
    seed: int
    greedy: bool
    clamped: tuple[str, ...]  # names of the values that differ from the request

    @classmethod
    def from_params(cls, params: SamplingParams, vocab_size: int) -> EffectiveSampling:
        clamped: list[str] = []
        temperature = params.temperature
        if 0.0 < temperature < MIN_TEMPERATURE:
            temperature = 0.0
            clamped.append("temperature")
        top_k = params.top_k
        if top_k >= vocab_size:
            top_k = 0
            clamped.append("top_k")
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") & _MASK64
        greedy = temperature == 0.0 or top_k == 1
        return cls(temperature, top_k, params.top_p, params.min_p, seed, greedy, tuple(clamped))


def position_generator(seed: int, position: int, generator: torch.Generator | None = None) -> torch.Generator:
    """A generator whose stream depends only on (seed, output position)."""
    g = generator if generator is not None else torch.Generator()
    # splitmix-style mixing so neighbouring positions get unrelated streams
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & ((1 << 64) - 1)
    z ^= z >> 31
    g.manual_seed(z & _MASK64)
    return g


def sample_row(logits: torch.Tensor, eff: EffectiveSampling, generator: torch.Generator | None) -> int:
    """Pick one token from a row of (penalized, masked) logits [V]."""
    if eff.greedy:
        return int(torch.argmax(logits))
    x = logits.float() / eff.temperature
    if eff.top_k > 0:
        kth = torch.topk(x, eff.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if eff.top_p < 1.0:
        probs = _nucleus(probs, eff.top_p)
    if eff.min_p > 0.0:
        probs = probs.masked_fill(probs < eff.min_p * probs.max(), 0.0)
    # Inverse CDF with one uniform draw: cheaper than multinomial, and a zero-probability token can never
    # be picked (its CDF step is empty).
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.rand((), generator=generator, dtype=cdf.dtype) * cdf[-1]
    return int(torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1))


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``. Grows a top-k window
    instead of sorting the whole vocabulary (the nucleus is usually a few dozen tokens)."""
    n = probs.shape[-1]
    for k in (64, 1024, n):  # past a thousand tokens a full sort is as cheap as a wider top-k
        vals, idx = torch.topk(probs, min(k, n)) if k < n else torch.sort(probs, descending=True)
        cum = torch.cumsum(vals, dim=-1)
        if cum[-1] >= top_p:
            break
    keep = idx[(cum - vals) < top_p]  # a token stays if the mass before it is still short of top_p
    out = torch.zeros_like(probs)
    out[keep] = probs[keep]
    return out
