"""The wheel built from the tree installs into a fresh venv and every sub-package imports from it.

Catches a broken package-dir mapping (a wheel that silently lacks a folder). Dependencies come from the
test venv through a .pth file placed *after* the fresh venv's own site-packages, so the wheel's copy of
llmtrace is the one imported.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_every_subpackage_imports(tmp_path: Path) -> None:
    # Build from a copy of the source tree, so a stale build/ folder can never leak into the wheel.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
        ".hypothesis", "*.duckdb", "*.duckdb.wal", "results", "tests"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, cwd=tmp_path)
    # PyPI's "llmtrace" is someone else's project: the distribution has its own name, the import and the
    # command keep "llmtrace".
    (wheel,) = dist.glob("llmtrace_stages-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    metadata = archive.read(f"{dist_info}/METADATA").decode()
    assert "\nName: llmtrace-stages\n" in metadata, metadata[:300]
    entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert "llmtrace = llmtrace.cli:main" in entry_points, entry_points
    packages = sorted({n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("/__init__.py")})
    for top in ("llmtrace.tracer", "llmtrace.adapters", "llmtrace.backend", "llmtrace.analyzers", "llmtrace.tui"):
        assert top in packages, f"wheel lacks {top}: {packages}"
    assert not any(p.split(".")[0] in {"tracer", "adapters", "backend", "analyzers", "tui"} for p in packages)

    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True)
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = (
        "import importlib, llmtrace, sys\n"
        f"assert llmtrace.__file__.startswith({str(site)!r}), llmtrace.__file__\n"
        f"for name in {packages!r}:\n"
        "    importlib.import_module(name)\n"
        "print('ok', len(sys.modules))\n"
    )
    out = subprocess.run([str(py), "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr


def test_light_core_does_not_import_torch() -> None:
    code = ("import sys, llmtrace, llmtrace.tracer, llmtrace.cli\n"
            "import llmtrace.adapters, llmtrace.analyzers\n"
            "assert 'torch' not in sys.modules, 'torch imported by the light core'\n"
            "assert 'textual' not in sys.modules, 'textual imported without the TUI'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_app_importing_the_middleware_loads_no_store() -> None:
    # An app that imports llmtrace and wraps its client pays for the store's libraries (duckdb, pyarrow:
    # ~0.2 s of imports) at init(), not at import: a module that only imports the middleware stays light.
    code = ("import sys, llmtrace\n"
            "from llmtrace.adapters import instrument\n"
            "heavy = sorted(m for m in ('duckdb', 'pyarrow') if m in sys.modules)\n"
            "assert not heavy, f'imported at startup: {heavy}'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
