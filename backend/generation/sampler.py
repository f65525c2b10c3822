"""Temperature, top-k, top-p and min-p sampling of one row of logits, with a per-request seed.

Every sequence is sampled on its own row (never a batch-wide reduction), and the random draw for output
position ``n`` comes from a generator seeded with ``(seed, n)``. So a seeded request picks the same tokens
whatever else is in the batch, and with or without speculation (which samples several positions at once).

The row work runs in numpy, single-threaded on purpose: it is a few tens of microseconds per row, and
torch's intra-op threads turn such small operations ten times slower when the machine is oversubscribed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

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


def position_uniform(seed: int, position: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, output position)."""
    # splitmix-style mixing so neighbouring positions get unrelated streams
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & ((1 << 64) - 1)
    z ^= z >> 31
    return float(np.random.Generator(np.random.PCG64(z)).random())


def sample_row(logits: np.ndarray, eff: EffectiveSampling, uniform: float | None) -> int:
    """Pick one token from a row of (penalized, masked) float32 logits [V]; ``uniform`` is the draw in [0, 1)
    (unused when greedy)."""
    if eff.greedy:
        return int(np.argmax(logits))
    if uniform is None:
        raise ValueError("sampling needs a uniform draw")
    x = logits.astype(np.float64) / eff.temperature
    if eff.top_k > 0 and eff.top_k < x.shape[-1]:
        kth = np.partition(x, -eff.top_k)[-eff.top_k]
        x = np.where(x < kth, -np.inf, x)
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    if eff.top_p < 1.0:
        probs = _nucleus(probs, eff.top_p)
    if eff.min_p > 0.0:
        probs = np.where(probs < eff.min_p * probs.max(), 0.0, probs)
    # Inverse CDF with one uniform draw: a zero-probability token can never be picked (its CDF step is empty).
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, uniform * cdf[-1], side="right"), probs.shape[-1] - 1))


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``. Looks at a top-k window
    first instead of sorting the whole vocabulary (the nucleus is usually a few dozen tokens)."""
    n = probs.shape[-1]
    for k in (64, 1024, n):
        idx = np.argpartition(-probs, k - 1)[:k] if k < n else np.arange(n)
        idx = idx[np.argsort(-probs[idx], kind="stable")]
        vals = probs[idx]
        cum = np.cumsum(vals)
        if cum[-1] >= top_p or k >= n:
            break
    keep = idx[(cum - vals) < top_p]  # a token stays if the mass before it is still short of top_p
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out
