"""A Python environment with one git revision's llmtrace installed (not editable), for the checks that run the
same workload under two revisions (wire_rows_compare.py, diagnose_trees_compare.py, collector_ab.py).

The environment is a venv whose llmtrace is the revision's own wheel-style install; every other package comes
from the running interpreter's site-packages through a ``.pth`` line. A ``.pth`` line only adds the folder to
the path: the ``.pth`` files in it (the editable finder of the checkout's own install) are not run, so the
revision's llmtrace is the only one that imports. Kept under ``tmp/env-<commit>`` and reused.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit_of(rev: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short=12", f"{rev}^{{commit}}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def side_env(rev: str, tmp: Path) -> str:
    """The python of an environment with ``rev``'s llmtrace (built once per commit under ``tmp``)."""
    commit = commit_of(rev)
    home = tmp / f"env-{commit}"
    python = home / "venv" / "bin" / "python"
    if (home / "ready").exists():
        return str(python)
    home.mkdir(parents=True, exist_ok=True)
    src = home / "src"
    subprocess.run(["git", "archive", "-o", str(home / "src.tar"), commit], cwd=ROOT, check=True)
    with tarfile.open(home / "src.tar") as tar:
        tar.extractall(src, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "zz_shared_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # the venv's own old setuptools would shadow the shared one the build needs
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
                   check=True, cwd=tempfile.gettempdir())
    where = subprocess.run([str(python), "-c", "import llmtrace, llmtrace.adapters; print(llmtrace.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout.strip()
    if not where.startswith(site):
        raise SystemExit(f"{rev}: llmtrace imports from {where}, not from {site}")
    (home / "ready").write_text(f"{commit}\n{where}\n")
    return str(python)


def sides_from(args_side: list[str] | None, before: str, after: str, tmp: Path) -> dict[str, str]:
    """``--side NAME=PYTHON`` pairs when given, else environments for ``before`` and ``after`` (revisions),
    named ``before`` and ``after``."""
    if args_side:
        sides = dict(s.split("=", 1) for s in args_side)
        if len(sides) != 2:
            raise SystemExit("give two --side NAME=PYTHON")
        return sides
    return {"before": side_env(before, tmp), "after": side_env(after, tmp)}
