"""Compile every Triton kernel for an H100/H200 (sm_90) ahead of time, no GPU needed; print resource use.

Run as a script in a process *without* ``TRITON_INTERPRET`` (the test does that). Triton's own
specialisation is mimicked: integer arguments equal to 1 become constants, pointers and integers
divisible by 16 carry that hint — as a real launch on contiguous tensors would. Prints one JSON object:
kernel name -> {"registers": int, "stack_bytes": int}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from llmtrace.backend.kernels import triton_decode, triton_norm_rotary, triton_prefill  # noqa: E402

CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
HEADS, KV_HEADS, DIM, PAGE, SPLITS, TABLE_WIDTH = 32, 8, 128, 16, 32, 513


def compile_sm90(fn, args: dict[str, object], constants: dict[str, object], num_warps: int) -> dict[str, int]:  # noqa: ANN001
    signature, attrs, consts = {}, {}, dict(constants)
    for i, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
            continue
        value = args[name]
        if isinstance(value, str):  # a pointer, given by its element type
            signature[name] = value
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value == 1:
            signature[name] = "constexpr"
            consts[name] = 1
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": 3})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(CUOBJDUMP), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    fields = dict(part.split(":", 1) for part in next(ln for ln in usage.splitlines() if "REG:" in ln).split())
    return {"registers": int(fields["REG"]), "stack_bytes": int(fields["STACK"])}


def ptr(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}[dtype]


def attention_args(dtype: torch.dtype) -> dict[str, object]:
    t = ptr(dtype)
    return {
        "q_ptr": t, "k_ptr": t, "v_ptr": t, "out_ptr": t, "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32",
        "query_start_loc_ptr": "*i32", "seq_ids_ptr": "*i32", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32",
        "qk_scale": 0.1, "stride_qt": HEADS * DIM, "stride_qh": DIM, "stride_qd": 1,
        "stride_ot": HEADS * DIM, "stride_oh": DIM, "stride_od": 1,
        "stride_kb": PAGE * KV_HEADS * DIM, "stride_ko": KV_HEADS * DIM, "stride_kh": DIM, "stride_kd": 1,
        "stride_vb": PAGE * KV_HEADS * DIM, "stride_vo": KV_HEADS * DIM, "stride_vh": DIM, "stride_vd": 1,
        "stride_bt": TABLE_WIDTH, "stride_po_s": HEADS * SPLITS * DIM, "stride_po_h": SPLITS * DIM,
        "stride_po_p": DIM, "stride_pl_s": HEADS * SPLITS, "stride_pl_h": SPLITS,
    }


def main() -> None:
    report: dict[str, dict[str, int]] = {}
    block_d = triton_decode.head_block(DIM)
    for dtype in (torch.bfloat16, torch.float32):
        tag = str(dtype).removeprefix("torch.")
        args = attention_args(dtype)
        precision = triton_decode.dot_precision(dtype)
        block_n, warps = triton_decode.decode_config(dtype, DIM)
        report[f"decode_split_{tag}"] = compile_sm90(
            triton_decode._decode_split_kernel, args,
            {"HEAD_DIM": DIM, "GROUP": HEADS // KV_HEADS, "PAGE": PAGE, "SPLIT": triton_decode.DEFAULT_SPLIT_SIZE,
             "BLOCK_H": 16, "BLOCK_N": block_n, "BLOCK_D": block_d, "HAS_SEQ_IDS": False,
             "DOT_PRECISION": precision, "WIDEN": False},
            warps,
        )
        block_m, block_n, warps = triton_prefill.prefill_config(dtype, DIM)
        report[f"prefill_{tag}"] = compile_sm90(
            triton_prefill._prefill_kernel, args,
            {"HEAD_DIM": DIM, "GROUP": HEADS // KV_HEADS, "GROUP_P2": triton.next_power_of_2(HEADS // KV_HEADS),
             "PAGE": PAGE, "BLOCK_M": block_m, "BLOCK_N": block_n,
             "BLOCK_D": block_d, "HAS_SEQ_IDS": True, "DOT_PRECISION": precision, "WIDEN": False},
            warps,
        )
    report["decode_reduce"] = compile_sm90(
        triton_decode._decode_reduce_kernel, attention_args(torch.bfloat16),
        {"HEAD_DIM": DIM, "SPLIT": triton_decode.DEFAULT_SPLIT_SIZE, "BLOCK_D": block_d, "HAS_SEQ_IDS": True},
        2,
    )
    hidden = 4096
    report["rms_norm_residual_bf16"] = compile_sm90(
        triton_norm_rotary._rms_norm_kernel,
        {"out_ptr": "*bf16", "x_ptr": "*bf16", "res_ptr": "*bf16", "res_out_ptr": "*bf16", "w_ptr": "*bf16",
         "eps": 1e-5, "n_cols": hidden, "stride_o": hidden, "stride_x": hidden, "stride_r": hidden,
         "stride_ro": hidden},
        {"BLOCK": hidden, "HAS_RESIDUAL": True},
        16,
    )
    report["rotary_bf16"] = compile_sm90(
        triton_norm_rotary._rotary_kernel,
        {"q_out_ptr": "*bf16", "k_out_ptr": "*bf16", "q_ptr": "*bf16", "k_ptr": "*bf16", "pos_ptr": "*i64",
         "cos_ptr": "*fp32", "sin_ptr": "*fp32", "stride_qt": HEADS * DIM, "stride_qh": DIM,
         "stride_kt": KV_HEADS * DIM, "stride_kh": DIM, "stride_qot": HEADS * DIM, "stride_qoh": DIM,
         "stride_kot": KV_HEADS * DIM, "stride_koh": DIM, "stride_cos": DIM // 2},
        {"NUM_Q_HEADS": HEADS, "NUM_K_HEADS": KV_HEADS, "HALF": DIM // 2, "BLOCK_QH": HEADS,
         "BLOCK_KH": KV_HEADS, "BLOCK_HALF": DIM // 2, "INTERLEAVED": False},
        4,
    )
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
