"""Read a Llama-architecture GGUF file: its metadata as a ``ModelConfig`` and its tensors as numpy arrays.

Quantized tensors are dequantized with the ``gguf`` package. Q4_1 tensors can also be handed out as their
exact 4-bit codes with per-block scale and minimum, so the model can run them through an int4 matmul
without losing anything.

GGUF stores the Q and K projections with their rows permuted for llama.cpp's interleaved rotary layout;
``tensor`` and ``q4_1_parts`` undo that permutation, so the model can use the usual half-split rotary
convention (the one the original checkpoint was trained with).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmtrace.backend.model.config import ModelConfig

Q4_1_BLOCK = 32


@dataclass(frozen=True, slots=True)
class Q4_1Parts:
    """The exact content of a Q4_1 matrix ``[rows, cols]``: ``value = codes * scale + minimum`` per block."""

    codes: np.ndarray  # uint8 [rows, cols], each in 0..15
    scale: np.ndarray  # float32 [rows, cols // 32]
    minimum: np.ndarray  # float32 [rows, cols // 32]


@dataclass(frozen=True, slots=True)
class Q8_0Parts:
    """The exact content of a Q8_0 matrix ``[rows, cols]``: ``value = codes * scale`` per block of 32."""

    codes: np.ndarray  # int8 [rows, cols]
    scale: np.ndarray  # float32 [rows, cols // 32]


class GGUFModelFile:
    """One opened GGUF file (memory-mapped by ``gguf.GGUFReader``)."""

    def __init__(self, path: str | Path) -> None:
        from gguf import GGUFReader

        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"no GGUF file at {self.path}")
        try:
            self._reader = GGUFReader(str(self.path))
        except Exception as exc:  # the gguf package raises several kinds on a damaged file
            raise ValueError(f"{self.path} is not a readable GGUF file: {exc}") from exc
        self._tensors = {t.name: t for t in self._reader.tensors}
        self.architecture = str(self.field("general.architecture", ""))
        if self.architecture != "llama":
            raise ValueError(f"{self.path}: only Llama-architecture GGUF files are supported, got {self.architecture!r}")
        self.config = self._read_config()

    @property
    def reader(self):  # noqa: ANN201 - the gguf.GGUFReader, shared with the tokenizer to skip a second parse
        return self._reader

    # metadata ---------------------------------------------------------------------------------------------

    def field(self, key: str, default: object = None) -> Any:  # a GGUF value: int, float, str, list
        """A metadata value as a Python object (str, int, float, bool or list), or ``default``."""
        f = self._reader.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def _read_config(self) -> ModelConfig:
        arch = self.architecture

        def need(key: str) -> Any:
            value = self.field(f"{arch}.{key}")
            if value is None:
                raise ValueError(f"{self.path}: metadata {arch}.{key} is missing")
            return value

        hidden = int(need("embedding_length"))
        heads = int(need("attention.head_count"))
        kv_heads = int(self.field(f"{arch}.attention.head_count_kv", heads))
        tokens = self.field("tokenizer.ggml.tokens")
        vocab = self.field(f"{arch}.vocab_size")
        if vocab is None:
            vocab = len(tokens) if isinstance(tokens, list) else self._tensors["token_embd.weight"].shape[1]
        eos = self.field("tokenizer.ggml.eos_token_id")
        bos = self.field("tokenizer.ggml.bos_token_id")
        return ModelConfig(
            name=str(self.field("general.name", self.path.stem)),
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(need("feed_forward_length")),
            num_layers=int(need("block_count")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=int(self.field(f"{arch}.rope.dimension_count", hidden // heads)),
            rope_theta=float(self.field(f"{arch}.rope.freq_base", 10000.0)),
            max_position=int(self.field(f"{arch}.context_length", 2048)),
            rms_eps=float(self.field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
            tie_word_embeddings="output.weight" not in self._tensors,
            bos_token_id=None if bos is None else int(bos),
            eos_token_id=None if eos is None else int(eos),
        )

    # tensors ----------------------------------------------------------------------------------------------

    def tensor_type(self, name: str) -> str:
        return self._get(name).tensor_type.name

    def _get(self, name: str):  # noqa: ANN202 - a gguf ReaderTensor
        try:
            return self._tensors[name]
        except KeyError:
            raise ValueError(f"{self.path}: tensor {name!r} is missing") from None

    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32, in PyTorch's ``[out, in]`` order, Q/K rows un-permuted."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        t = self._get(name)
        shape = tuple(int(x) for x in reversed(t.shape))  # GGUF lists the fastest dimension first
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
            array = dequantize(t.data, t.tensor_type) if t.tensor_type == GGMLQuantizationType.BF16 else t.data
            array = np.array(array, dtype=np.float32).reshape(shape)  # a copy: the mmap is read-only
        else:
            array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        return self._unpermute(name, array)

    def q4_1_parts(self, name: str) -> Q4_1Parts | None:
        """The exact 4-bit codes of a Q4_1 matrix, or None when the tensor is stored another way."""
        from gguf import GGMLQuantizationType

        t = self._get(name)
        if t.tensor_type != GGMLQuantizationType.Q4_1 or len(t.shape) != 2:
            return None
        rows, cols = int(t.shape[1]), int(t.shape[0])
        blocks = np.asarray(t.data, dtype=np.uint8).reshape(rows, cols // Q4_1_BLOCK, 20)
        scale = blocks[:, :, 0:2].copy().view(np.float16).astype(np.float32)[..., 0]
        minimum = blocks[:, :, 2:4].copy().view(np.float16).astype(np.float32)[..., 0]
        packed = blocks[:, :, 4:20]
        # a block's first 16 values sit in the low nibbles, the next 16 in the high nibbles
        codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).reshape(rows, cols)
        return Q4_1Parts(
            codes=self._unpermute(name, codes),
            scale=self._unpermute(name, scale),
            minimum=self._unpermute(name, minimum),
        )

    def q8_0_parts(self, name: str) -> Q8_0Parts | None:
        """The exact 8-bit codes of a Q8_0 matrix (the token embedding of the default model), or None."""
        from gguf import GGMLQuantizationType

        t = self._get(name)
        if t.tensor_type != GGMLQuantizationType.Q8_0 or len(t.shape) != 2:
            return None
        rows, cols = int(t.shape[1]), int(t.shape[0])
        blocks = np.asarray(t.data, dtype=np.uint8).reshape(rows, cols // Q4_1_BLOCK, 34)  # fp16 d, 32 x int8
        scale = blocks[:, :, 0:2].copy().view(np.float16).astype(np.float32)[..., 0]
        codes = blocks[:, :, 2:34].copy().view(np.int8).reshape(rows, cols)
        return Q8_0Parts(codes=self._unpermute(name, codes), scale=self._unpermute(name, scale))

    def _unpermute(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Undo llama.cpp's row order for Q and K (pairs interleaved -> halves), on any per-row array."""
        if name.endswith("attn_q.weight"):
            heads = self.config.num_heads
        elif name.endswith("attn_k.weight"):
            heads = self.config.num_kv_heads
        else:
            return rows
        n = rows.shape[0]
        rest = rows.shape[1:]
        return np.ascontiguousarray(rows.reshape(heads, n // heads // 2, 2, *rest).swapaxes(1, 2).reshape(n, *rest))
