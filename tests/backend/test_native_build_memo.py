"""The native library's build is tried once per machine, not once per process: a compiler that refuses the
source (``cpu_native.c`` stops with ``#error`` on a CPU without AVX-512) is remembered in the cache directory,
so every later ``llmtrace serve`` and engine skips the ~1 s gcc run; another compiler is tried afresh, and a
compiler killed by a signal is not taken for an answer. A real cache directory; the compilers are scripts that
log each run; each ``load()`` starts from the module's first-call state, as a new process does."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtrace.backend.model import cpu_features, cpu_native

AVX512 = frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"})


def _compiler(tmp: Path, name: str, body: str) -> Path:
    cc = tmp / name
    cc.write_text(f"#!/bin/sh\necho run >> {tmp / (name + '.runs')}\n{body}\n")
    cc.chmod(0o755)
    return cc


def _features(flags: frozenset[str]) -> cpu_features.CpuFeatures:
    return cpu_features.CpuFeatures(flags, frozenset(), "auto", "AVX512", "test CPU")


def _load(monkeypatch: pytest.MonkeyPatch, tmp: Path, cc: Path,
          flags: frozenset[str] = AVX512) -> tuple[bool, str | None]:
    """``cpu_native.load()`` as a fresh process makes it (restored to this process's state afterwards), on a
    CPU with ``flags`` (by default one the kernels build for, so the compiler is asked whatever this CPU is)."""
    monkeypatch.setattr(cpu_features, "detect", lambda: _features(flags))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.delenv("LLMTRACE_NATIVE", raising=False)
    for name, first in (("_tried", False), ("_lib", None), ("load_error", None)):
        monkeypatch.setattr(cpu_native, name, first)
    return cpu_native.load() is None, cpu_native.load_error


def _runs(tmp: Path, name: str) -> int:
    log = tmp / f"{name}.runs"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_refused_build_is_not_retried_by_the_next_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cc = _compiler(tmp_path, "refuses", 'echo "cpu_native.c:14:2: error: #error needs AVX-512" >&2; exit 1')
    first = _load(monkeypatch, tmp_path, cc)
    second = _load(monkeypatch, tmp_path, cc)
    assert first[0] and second[0]  # no library: the torch path serves
    assert "needs AVX-512" in str(first[1]) and "needs AVX-512" in str(second[1]), (first, second)
    assert _runs(tmp_path, "refuses") == 1  # the second "process" read the first one's answer
    assert "remembered in" in str(second[1]) and "remove it to retry" in str(second[1]), second
    # another compiler is another question
    other = _compiler(tmp_path, "other", 'echo "other: error: no" >&2; exit 1')
    assert _load(monkeypatch, tmp_path, other)[0] and _runs(tmp_path, "other") == 1


def test_a_compiler_killed_by_a_signal_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cc = _compiler(tmp_path, "killed", "kill -9 $$")
    assert _load(monkeypatch, tmp_path, cc)[0] and _load(monkeypatch, tmp_path, cc)[0]
    assert _runs(tmp_path, "killed") == 2
    assert not list((tmp_path / "cache").rglob("*.failed"))


def test_a_cpu_without_avx512_never_runs_the_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An AVX2 CPU (or LLMTRACE_CPU_PATH=avx2) is known from its flags: no gcc run, no memo, the reason said."""
    cc = _compiler(tmp_path, "never", "exit 0")
    missing, error = _load(monkeypatch, tmp_path, cc, frozenset({"avx2", "fma", "f16c"}))
    assert missing and "lacks AVX-512" in str(error) and "avx2" in str(error), error
    assert _runs(tmp_path, "never") == 0
