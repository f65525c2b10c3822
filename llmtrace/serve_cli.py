"""``llmtrace serve`` as the command line sees it: the parser is built from the backend's argument list alone
(argparse, no torch), so ``--help`` works on the light core; the server itself is imported only to run.

Where the backend extra is missing, the help ends with the line that says how to install it, and running the
command prints that line and exits 2 (a usage error, as argparse's own), never an ImportError traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from llmtrace.backend.server.arguments import add_arguments as _server_arguments
from llmtrace.cli import EXTRA_OF_MODULE, missing_extra_message

# uvloop and httptools are accelerators uvicorn uses when present (uvloop is not even installed on Windows);
# the server runs without them, so their absence is no reason to refuse.
_OPTIONAL = frozenset({"uvloop", "httptools"})


def missing_backend() -> str | None:
    """The first module of the backend extra that is not installed, or None. ``find_spec`` looks without
    importing (importing torch to learn that it is there would cost seconds on every ``--help``)."""
    for module, extra in EXTRA_OF_MODULE.items():
        if extra == "backend" and module not in _OPTIONAL and importlib.util.find_spec(module) is None:
            return module
    return None


def missing_backend_line(module: str) -> str:
    """The line every command prints for a missing extra (llmtrace.cli.missing_extra_message)."""
    return missing_extra_message(ModuleNotFoundError(name=module))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _server_arguments(parser)
    missing = missing_backend()
    if missing is not None:
        # Raw: one line however narrow the terminal, so a script can grep for it.
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = missing_backend_line(missing)


def run(args: argparse.Namespace) -> int:
    missing = missing_backend()
    if missing is not None:
        print(missing_backend_line(missing), file=sys.stderr)
        return 2
    from llmtrace.backend.server import cli

    return cli.run(args)
