"""Attention backends over the paged KV cache (torch reference; Triton on CUDA)."""
