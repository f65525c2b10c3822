"""The ``llmtrace`` command line. Each subcommand lives in its own module, imported only when used,
so ``llmtrace sql`` never pays for torch or Textual.

A command module offers two functions: ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from types import ModuleType

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("llmtrace.demo", "run the support-agent demo on the bundled backend and diagnose it"),
    "serve": ("llmtrace.serve_cli", "serve the bundled backend over OpenAI/Anthropic-compatible HTTP"),
    "collect": ("llmtrace.tracer.cli.collect", "receive OTLP/HTTP spans from other processes into the store"),
    "explore": ("llmtrace.tui.cli", "open the terminal UI over a store"),
    "sql": ("llmtrace.tracer.cli.sql", "run read-only SQL over the store and print a table"),
    "diagnose": ("llmtrace.analyzers.diagnose.diagnose_cli", "run the analyzers and print findings"),
    "check": ("llmtrace.check_cmd", "CI gate: fail when cache hit rate (or TTFT, cost) regresses"),
    "report": ("llmtrace.report.cli", "write a self-contained HTML report (findings, charts, trace pages)"),
    "stages": ("llmtrace.tracer.cli.stages", "print the stage registry"),
    "export": ("llmtrace.tracer.cli.export", "export the store as hive-partitioned Parquet"),
    "deploy": ("llmtrace.tracer.cli.deploy", "annotate the store with a deploy (llmtrace deploy mark NAME)"),
    "model": ("llmtrace.backend.model.pull", "manage the bundled model (llmtrace model pull)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmtrace",
        description="Trace LLM requests through 42 stages and find the one that hurts.",
    )
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == only:
            _load(module).add_arguments(p)
    return parser


# Which extra brings a module that a command imports on demand. One table, so every command that needs an
# extra names the same install line (a raw ModuleNotFoundError traceback tells a new user nothing).
EXTRA_OF_MODULE: dict[str, str] = {
    **dict.fromkeys(("torch", "numpy", "gguf", "tokenizers", "jinja2", "llguidance", "starlette", "uvicorn",
                     "uvloop", "httptools"), "backend"),
    "triton": "gpu",
    **dict.fromkeys(("openai", "anthropic"), "clients"),
    "vl_convert": "report",
}
DISTRIBUTION = "llmtrace-stages"


def version() -> str:
    """The installed distribution's version (an editable install reports pyproject's)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution; run from a source tree)"


def missing_extra_message(exc: ImportError) -> str:
    """One line naming the missing module and the pip line that brings it."""
    missing = (getattr(exc, "name", None) or str(exc)).split(".")[0]
    extra = EXTRA_OF_MODULE.get(missing)
    hint = f" (install it with: pip install '{DISTRIBUTION}[{extra}]')" if extra else ""
    return f"llmtrace: this command needs {missing}, which is not installed{hint}"


def _load(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in EXTRA_OF_MODULE:
            raise  # a module of llmtrace itself failed to import: a broken install, whose traceback says where
        raise SystemExit(missing_extra_message(exc)) from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        build_parser().parse_args(argv)  # prints argparse's own "invalid choice" message and exits 2
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    module = _load(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        # Commands import their optional parts lazily (demo needs the SDKs and torch); a missing one that
        # belongs to an extra is a setup problem, not a crash.
        if (exc.name or "").split(".")[0] not in EXTRA_OF_MODULE:
            raise
        raise SystemExit(missing_extra_message(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
