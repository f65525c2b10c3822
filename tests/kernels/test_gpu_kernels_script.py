"""``benchmarks/gpu_kernels.py`` runs end to end on CPU (interpreter smoke mode) and refuses honestly
without a GPU, so its one run on a real device does not die on a typo."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from kernel_reference import (  # noqa: F401 - interpreter_flag is an autouse fixture
    DEVICE,
    interpreter_flag,
    need_triton,
)

need_triton()

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_kernels.py"


def load_script():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("gpu_kernels_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_run_on_cpu_checks_and_times_everything(tmp_path):
    out = tmp_path / "gpu_kernels.json"
    assert load_script().main(["--cpu-interpret", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["status"] == "complete", data["errors"]
    assert data["all_correct"] is True
    assert data["batch_invariant_decode"] is True and data["invariant_mode_chunking_bitwise"] is True
    for key in ("copy_bandwidth_gbps", "paged_decode_ms_b2_kv40", "sdpa_ms_b2_kv40", "torch_reference_ms_b2_kv40",
                "paged_decode_speedup_vs_sdpa_b2_kv40", "paged_decode_bw_fraction_b2_kv40", "sweep_best"):
        assert key in data, key
    assert data["device"].startswith("cpu")


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the no-GPU path")
def test_without_a_gpu_it_says_so_and_writes_nothing(capsys):
    result = SCRIPT.parent / "results" / "gpu_kernels.json"
    before = result.stat().st_mtime_ns if result.exists() else None
    assert load_script().main([]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    after = result.stat().st_mtime_ns if result.exists() else None
    assert before == after
