"""Server settings: one frozen record, checked when made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # replica_set pulls in the engine; config stays light
    from llmtrace.backend.server.normalization import Form
    from llmtrace.backend.server.replica_set import Policy


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    replicas: int = 1
    routing: Policy = "prefix_aware"
    max_running: int = 32  # across all replicas
    max_queued: int = 64
    normalize: Form = "nfc"
    strip_invisible: bool = False
    aliases: dict[str, str] = field(default_factory=dict)
    served_model_name: str | None = None
    default_max_tokens: int = 256  # chat requests that give no max_tokens
    max_body_bytes: int = 8 << 20
    drain_timeout_s: float = 30.0  # how long shutdown waits for in-flight requests
    speculative: str = "off"  # the speculation requests get unless they ask otherwise: off, ngram or draft
    speculative_k: int = 4  # tokens drafted per step when speculating

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.routing not in ("prefix_aware", "round_robin"):
            raise ValueError(f"routing must be prefix_aware or round_robin, got {self.routing!r}")
        if self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")
        if self.max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {self.max_queued}")
        if self.normalize not in ("nfc", "nfkc", "none"):
            raise ValueError(f"normalize must be nfc, nfkc or none, got {self.normalize!r}")
        if self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")
        if self.speculative not in ("off", "ngram", "draft"):
            raise ValueError(f"speculative must be off, ngram or draft, got {self.speculative!r}")
        if not 1 <= self.speculative_k <= 16:
            raise ValueError(f"speculative_k must be in 1..16, got {self.speculative_k}")
