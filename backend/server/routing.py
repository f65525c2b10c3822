"""Model routing: the name a caller asked for -> a model this server holds (exact name, alias or default)."""

from __future__ import annotations

from dataclasses import dataclass

from llmtrace.backend.server.errors import APIError


@dataclass(frozen=True, slots=True)
class Route:
    model: str  # the served model id that answers
    rule: str  # exact, alias or default
    fallback: bool  # true when the request fell back to another model than it named


class ModelRouter:
    def __init__(self, models: list[str], aliases: dict[str, str] | None = None) -> None:
        if not models:
            raise ValueError("the router needs at least one model")
        self.models = list(models)
        self.aliases = dict(aliases or {})
        for name, target in self.aliases.items():
            if target not in self.models:
                raise ValueError(f"alias {name!r} points at {target!r}, which is not served ({', '.join(self.models)})")

    @property
    def default(self) -> str:
        return self.models[0]

    def route(self, requested: str | None) -> Route:
        if requested is None or requested == "":
            return Route(self.default, "default", fallback=False)
        if requested in self.models:
            return Route(requested, "exact", fallback=False)
        if requested in self.aliases:
            return Route(self.aliases[requested], "alias", fallback=False)
        names = self.models + sorted(self.aliases)
        raise APIError(
            404,
            f"The model '{requested}' does not exist on this server. Available models: {', '.join(names)}",
            param="model",
            code="model_not_found",
        )

    def listed(self) -> list[tuple[str, str]]:
        """(id, owned_by) for /v1/models: the models, then the aliases."""
        return [(m, "llmtrace") for m in self.models] + [(a, f"alias:{t}") for a, t in sorted(self.aliases.items())]
