"""OpenAI- and Anthropic-compatible HTTP server over the engine."""
