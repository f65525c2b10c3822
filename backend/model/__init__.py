"""Llama-architecture model: GGUF reader, tokenizer, chat template, forward pass."""
