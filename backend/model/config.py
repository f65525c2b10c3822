"""The shape of a Llama-architecture model, read from GGUF metadata or made up for tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Everything the forward pass needs to know about the architecture (no weights)."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    max_position: int = 2048  # the context length the model was trained for
    rms_eps: float = 1e-5
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        positive = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "max_position": self.max_position,
        }
        for key, value in positive.items():
            if value <= 0:
                raise ValueError(f"{key} must be positive, got {value}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def gqa_ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_parameters(self) -> int:
        """Parameter count (the tied LM head counted once)."""
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        ffn = 3 * self.hidden_size * self.intermediate_size
        per_layer = attn + ffn + 2 * self.hidden_size
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + self.num_layers * per_layer + self.hidden_size + head

    def kv_bytes_per_token(self, element_size: int) -> int:
        """Bytes of keys plus values one token occupies across all layers."""
        return 2 * self.num_layers * self.kv_size * element_size


def tiny_config() -> ModelConfig:
    """The default model's architecture shrunk for fast tests; the vocabulary stays real-sized so the
    real tokenizer works with it."""
    return ModelConfig(
        name="tiny-llama",
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        max_position=8192,
        rms_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
