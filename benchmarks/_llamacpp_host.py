"""llama.cpp as its users build it on this host: llama-cpp-python compiled from source with GGML_NATIVE.

Why: the prebuilt wheels (xllamacpp's, llama-cpp-python's) are compiled for a baseline x86-64 (xllamacpp
reports AVX2 and no AVX-512), so on an AVX-512 CPU they are not the llama.cpp a user who builds it gets. This
helper builds llama-cpp-python ``VERSION`` from its source distribution with ``-DGGML_NATIVE=on`` (``-march=native``
for ggml's CPU backend) into ``~/.cache/llmtrace/llamacpp-<key>``, where the key hashes the CPU model and flags,
the compiler and the version: one build per machine kind (minutes of every core), reused by every later run.

``python benchmarks/_llamacpp_host.py`` builds (or finds) it and prints the directory and llama.cpp's own
system info line. ``BENCH_LLAMACPP_HOST``: ``build`` (the default: build when missing), ``cached`` (use a build
already there, never build), ``0`` (no host-built peer).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.3.36"
CMAKE_ARGS = "-DGGML_NATIVE=on"
MODE = os.environ.get("BENCH_LLAMACPP_HOST", "build")
BUILD_TIMEOUT_S = 3600  # two shared cores compile llama.cpp in ~5-15 minutes


def _cpu_text() -> str:
    out = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                out += line + "\n"
            if line.startswith("flags"):
                break
    except OSError:
        pass
    return out


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or ""
    if not cc:
        return ""
    run = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return run.stdout.splitlines()[0] if run.stdout else cc


def key() -> str:
    """What the build depends on: this CPU (-march=native), the compiler, the version and the CMake flags."""
    text = "\n".join((_cpu_text(), _compiler(), VERSION, CMAKE_ARGS, sys.version.split()[0]))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def site_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmtrace" / f"llamacpp-{key()}"


def _built(site: Path) -> bool:
    return (site / "llama_cpp" / "__init__.py").is_file() and (site / "diskcache").is_dir()


def ensure() -> Path:
    """The directory holding the host-built ``llama_cpp`` (built now if missing and MODE allows); raises
    RuntimeError with the reason where there is none."""
    if MODE == "0":
        raise RuntimeError("the host-built llama.cpp is off (BENCH_LLAMACPP_HOST=0)")
    site = site_dir()
    if _built(site):
        return site
    if MODE != "build":
        raise RuntimeError(f"no host-built llama.cpp in {site} (BENCH_LLAMACPP_HOST={MODE})")
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{site.name}-", dir=site.parent))
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tmp)]
    try:
        # llama_cpp's own dependencies (numpy, jinja2, typing-extensions) come from this environment; diskcache,
        # which it imports at load and the environment may lack, goes beside it
        for args in (["--no-binary", "llama-cpp-python", f"llama-cpp-python=={VERSION}"], ["diskcache>=5.6"]):
            run = subprocess.run([*pip, *args], env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                 check=False)
            if run.returncode != 0:
                raise RuntimeError(f"building llama-cpp-python {VERSION} failed: {run.stderr.strip()[-800:]}")
        if not _built(site):
            tmp.rename(site)  # whole or not at all: a half build is never taken for a cached one
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return site


def activate() -> Path:
    """Make ``import llama_cpp`` load the host-built copy (first on sys.path) and return its directory."""
    site = ensure()
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    loaded = sys.modules.get("llama_cpp")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(site)):
        raise RuntimeError(f"another llama_cpp is already imported ({loaded.__file__})")
    return site


def system_info() -> str:
    """llama.cpp's own system info line (the CPU features its build uses), verbatim."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return (info.decode() if isinstance(info, bytes) else str(info)).strip()


if __name__ == "__main__":
    print(activate())
    print(system_info())
