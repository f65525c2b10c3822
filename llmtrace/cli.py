"""The ``llmtrace`` command line. Each subcommand lives in its own module, imported only when used,
so ``llmtrace sql`` never pays for torch or Textual.

A command module offers two functions: ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("llmtrace.demo", "run the support-agent demo on the bundled backend and diagnose it"),
    "serve": ("llmtrace.backend.server.cli", "serve the bundled backend over OpenAI/Anthropic-compatible HTTP"),
    "collect": ("llmtrace.tracer.collect_cli", "receive OTLP/HTTP spans from other processes into the store"),
    "explore": ("llmtrace.tui.cli", "open the terminal UI over a store"),
    "sql": ("llmtrace.tracer.sql_cli", "run read-only SQL over the store and print a table"),
    "diagnose": ("llmtrace.analyzers.diagnose_cli", "run the analyzers and print findings"),
    "check": ("llmtrace.analyzers.check_cli", "CI gate: fail when cache hit rate (or TTFT, cost) regresses"),
    "stages": ("llmtrace.tracer.stages_cli", "print the stage registry"),
    "export": ("llmtrace.tracer.export_cli", "export the store as hive-partitioned Parquet"),
    "deploy": ("llmtrace.tracer.deploy_cli", "annotate the store with a deploy (llmtrace deploy mark NAME)"),
    "model": ("llmtrace.backend.model.pull", "manage the bundled model (llmtrace model pull)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmtrace",
        description="Trace LLM requests through 42 stages and find the one that hurts.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == only:
            _load(module).add_arguments(p)
    return parser


def _load(module: str) -> object:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        extra = "backend" if "backend" in module or missing in ("torch", "gguf", "tokenizers", "uvicorn") else None
        hint = f" (install it with: pip install 'llmtrace[{extra}]')" if extra else ""
        raise SystemExit(f"llmtrace: this command needs {missing}, which is not installed{hint}") from None


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
        return int(module.run(args) or 0)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
