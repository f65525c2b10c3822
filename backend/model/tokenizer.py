"""A byte-level BPE tokenizer rebuilt from GGUF metadata with the ``tokenizers`` library.

A GGUF file carries the vocabulary (``tokenizer.ggml.tokens``), the merge list, token types and the special
ids, but not the Hugging Face ``tokenizer.json``; we rebuild it so that encode/decode match the model's own
tokenizer, and so llguidance can take the same JSON for its token trie.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from llmtrace.backend.model.chat_template import CHATML_TEMPLATE, render_chat_template
from llmtrace.backend.model.gguf_metadata import read_metadata

# GGUF token types (llama.cpp's llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# The GPT-2 split regex; llama.cpp's "smollm"/"starcoder" presets add a split of every digit before it.
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_CACHE: dict[tuple[str, int], Tokenizer] = {}
# texts at least this long are encoded with the GIL released (Tokenizer.encode); ~1.5k tokens, ~5 ms of encoding
GIL_FREE_ENCODE_CHARS = 8192
_DIGIT_FIRST_PRESETS = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_LLAMA3_PRESETS = {"llama-bpe", "llama3", "qwen2", "smaug-bpe", "falcon3", "deepseek-r1-qwen"}


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's reversible map from printable unicode stand-ins back to raw bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _pre_tokenizer(preset: str) -> pre_tokenizers.PreTokenizer:
    if preset in _LLAMA3_PRESETS:
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    steps: list[pre_tokenizers.PreTokenizer] = []
    if preset in _DIGIT_FIRST_PRESETS:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    return pre_tokenizers.Sequence(steps)


def _byte_level_bpe(tokens: list[str], merges: list[str], preset: str) -> tuple[HFTokenizer, list[bytes]]:
    """GPT-2-style byte-level BPE (``tokenizer.ggml.model == "gpt2"``)."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [(a, b) for a, b in (m.split(" ", 1) for m in merges)]  # "left right"
    # Llama 3 style vocabularies take a whole word straight from the vocabulary before merging
    model = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False,
                       ignore_merges=preset in _LLAMA3_PRESETS)
    tk = HFTokenizer(model)
    tk.pre_tokenizer = _pre_tokenizer(preset)
    tk.decoder = decoders.ByteLevel()
    table = _byte_decoder()
    raw = [bytes(table[ch] for ch in tok) if all(ch in table for ch in tok) else tok.encode("utf-8") for tok in tokens]
    return tk, raw


def _sentencepiece_bpe(
    tokens: list[str], scores: list[float], types: list[int], add_space_prefix: bool
) -> tuple[HFTokenizer, list[bytes]]:
    """SentencePiece BPE (``tokenizer.ggml.model == "llama"``): merges rebuilt from the scores (a merge
    happens earlier the higher its result scores), spaces as U+2581, byte-fallback tokens ``<0xAB>``."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    ranked: list[tuple[float, int, int, str, str]] = []
    for tok, i in vocab.items():
        if types[i] != TOKEN_NORMAL:
            continue
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], vocab[left], vocab[right], left, right))
    ranked.sort()
    pairs = [(left, right) for _, _, _, left, right in ranked]
    unk = next((tokens[i] for i, t in enumerate(types) if t == TOKEN_UNKNOWN), None)
    tk = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Prepend("\u2581")] if add_space_prefix else []
    tk.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "\u2581")])
    dec = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        dec.append(decoders.Strip(content=" ", left=1, right=0))
    tk.decoder = decoders.Sequence(dec)
    raw: list[bytes] = []
    for tok, kind in zip(tokens, types, strict=True):
        if kind == TOKEN_BYTE and len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
            raw.append(bytes([int(tok[3:5], 16)]))
        else:
            raw.append(tok.replace("\u2581", " ").encode("utf-8"))
    return tk, raw


class Tokenizer:
    """Encode/decode, raw token bytes for incremental detokenization, special ids and the chat template."""

    __slots__ = (
        "_tk", "_token_bytes", "vocab_size", "eos_token_ids", "bos_token_id", "pad_token_id",
        "special_ids", "chat_template", "add_bos", "_id_to_token", "kind",
    )

    def __init__(
        self,
        tokens: list[str],
        merges: list[str] | None = None,
        token_types: list[int] | None = None,
        *,
        scores: list[float] | None = None,
        bos_token_id: int | None = None,
        eos_token_ids: set[int] | None = None,
        pad_token_id: int | None = None,
        chat_template: str | None = None,
        pre_preset: str = "gpt2",
        add_bos: bool = False,
        add_space_prefix: bool = True,
    ) -> None:
        """Byte-level BPE from ``merges``, or SentencePiece BPE from ``scores`` (exactly one of them)."""
        if not tokens:
            raise ValueError("tokenizer needs a non-empty vocabulary")
        if (merges is None) == (scores is None):
            raise ValueError("give merges (byte-level BPE) or scores (SentencePiece), not both or neither")
        types = token_types or [TOKEN_NORMAL] * len(tokens)
        if len(types) != len(tokens) or (scores is not None and len(scores) != len(tokens)):
            raise ValueError(f"token_types/scores must have one entry for each of the {len(tokens)} tokens")
        if merges is not None:
            self.kind = "bpe"
            tk, raw = _byte_level_bpe(tokens, merges, pre_preset)
        else:
            self.kind = "spm"
            tk, raw = _sentencepiece_bpe(tokens, list(scores or ()), types, add_space_prefix)
        special = {i for i, t in enumerate(types) if t == TOKEN_CONTROL}
        user_defined = {i for i, t in enumerate(types) if t == TOKEN_USER_DEFINED}
        # Control tokens are "special": matched whole in text and dropped by skip_special_tokens.
        tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in sorted(special)])
        if user_defined:
            tk.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in sorted(user_defined)])
        for i in special | user_defined:
            raw[i] = tokens[i].encode("utf-8")
        self._tk = tk
        self._id_to_token = tokens
        self.vocab_size = len(tokens)
        self.bos_token_id = bos_token_id
        self.eos_token_ids = set(eos_token_ids or ())
        self.pad_token_id = pad_token_id
        self.special_ids = frozenset(special)
        self.chat_template = chat_template or CHATML_TEMPLATE
        self.add_bos = add_bos
        self._token_bytes = raw

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_gguf(cls, path: str | Path, *, reader: Any = None) -> Tokenizer:
        """Build from a GGUF file (``reader``: an already opened ``gguf.GGUFReader`` of it, to skip a second
        parse). Tokenizers are read-only, so one per file (and modification time) is kept and shared."""
        resolved = Path(path).resolve()
        key = (str(resolved), resolved.stat().st_mtime_ns)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        if reader is not None:
            fields = reader.fields
            metadata = {k: f.contents() for k, f in fields.items() if k.startswith("tokenizer.")}
        else:
            try:  # the metadata alone: GGUFReader would also map every tensor (~1.8 s of CPU a start)
                metadata = read_metadata(resolved)
            except ValueError:
                from gguf import GGUFReader

                fields = GGUFReader(str(resolved)).fields
                metadata = {k: f.contents() for k, f in fields.items() if k.startswith("tokenizer.")}
        tokenizer = cls._from_metadata(metadata, resolved)
        _CACHE[key] = tokenizer
        return tokenizer

    @classmethod
    def _from_metadata(cls, metadata: dict[str, Any], path: Path) -> Tokenizer:
        def get(key: str, default: Any = None) -> Any:
            value = metadata.get(key)
            return default if value is None else value

        model_kind = get("tokenizer.ggml.model")
        if model_kind not in ("gpt2", "llama"):
            raise ValueError(f"{path}: tokenizer model {model_kind!r} is neither byte-level BPE ('gpt2') nor "
                             "SentencePiece BPE ('llama')")
        tokens = list(get("tokenizer.ggml.tokens"))
        merges = list(get("tokenizer.ggml.merges", [])) if model_kind == "gpt2" else None
        scores = [float(x) for x in get("tokenizer.ggml.scores", [0.0] * len(tokens))] if merges is None else None
        types = [int(t) for t in get("tokenizer.ggml.token_type", [TOKEN_NORMAL] * len(tokens))]
        eos = get("tokenizer.ggml.eos_token_id")
        eot = get("tokenizer.ggml.eot_token_id")
        eos_ids = {int(x) for x in (eos, eot) if x is not None}
        bos = get("tokenizer.ggml.bos_token_id")
        pad = get("tokenizer.ggml.padding_token_id")
        return cls(
            tokens,
            merges,
            types,
            scores=scores,
            bos_token_id=None if bos is None else int(bos),
            eos_token_ids=eos_ids,
            pad_token_id=None if pad is None else int(pad),
            chat_template=get("tokenizer.chat_template"),
            pre_preset=get("tokenizer.ggml.pre", "gpt2"),
            add_bos=bool(get("tokenizer.ggml.add_bos_token", model_kind == "llama")),
            add_space_prefix=bool(get("tokenizer.ggml.add_space_prefix", True)),
        )

    # ---------------------------------------------------------------- encode / decode
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        # tokenizers' encode holds the GIL throughout (a 600 KB prompt: ~0.4-0.5 s in which no other thread of the
        # server runs, its event loop included); encode_batch releases it and gives the same ids. Short texts keep
        # the plain call: nothing to gain there.
        if len(text) >= GIL_FREE_ENCODE_CHARS:
            ids = self._tk.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = self._tk.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tk.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token stands for (a piece of a UTF-8 character possibly)."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} outside vocabulary of {self.vocab_size}")
        return self._token_bytes[token_id]

    def id_to_token(self, token_id: int) -> str:
        return self._id_to_token[token_id]

    def token_to_id(self, token: str) -> int | None:
        return self._tk.token_to_id(token)

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def to_json(self) -> str:
        """The ``tokenizers`` JSON (what llguidance's ``LLTokenizer`` reads)."""
        return self._tk.to_str()

    @property
    def eos_token(self) -> str:
        return self._id_to_token[min(self.eos_token_ids)] if self.eos_token_ids else ""

    @property
    def bos_token(self) -> str:
        return "" if self.bos_token_id is None else self._id_to_token[self.bos_token_id]

    # ---------------------------------------------------------------- chat
    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        template_override: str | None = None,
    ) -> str:
        return render_chat_template(
            template_override or self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, eos={sorted(self.eos_token_ids)}, bos={self.bos_token_id})"

