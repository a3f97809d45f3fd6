"""The single owner of the SQLite writer connection, with group commit.

Callers submit a synchronous function of the connection; the writer task gathers
every submission that is waiting, runs them all in one transaction on a worker
thread, commits once, then answers each caller.

Two lanes. A *request* (the default: an accepted hook event, an operator's command)
has someone waiting on an HTTP answer; *background* work (what session actors store,
pruning) has not. Each transaction takes every waiting request (up to ``max_batch``),
then background work up to a weight of ``background_weight`` -- of
``request_background_weight`` when it carries requests, which wait for its commit -- at
least one piece, so it always moves on. A piece's weight is its size (observation rows,
say). Before the lanes, everything waiting went into one transaction: under a 500
events/s open loop, batches of 80-500 operations, mostly observations being stored (~150-180 us a row with
its FTS5 and file rows), took 0.25-0.76 s, and every event accepted meanwhile waited
for that commit. Submissions of one lane run in the order they were made; the two
lanes are independent (the operations are). If any operation raises, the
transaction is rolled back and the batch run again with each operation inside its
own savepoint, so one failing operation does not undo the others (operations must
therefore be safe to run twice: they are pure functions of the database state). Under load many HTTP requests
share one commit -- and so one fsync -- without any caller waiting on a timer.

Writes of one kind can also share their statements (:meth:`GroupCommitWriter.submit_together`):
consecutive submissions that name the same ``together`` function run as one call of it
over all their arguments. Each statement gives up the GIL and must take it back from a
busy Trio thread (bench/README, "Fewer trips through the GIL"), so eight actors' stores
of observations cost the statements of one, not of eight.

Resource handling:
    The connection is only ever touched from the thread running the current batch,
    serialized by a ``CapacityLimiter(1)``. :meth:`GroupCommitWriter.run` closes the
    submission channel when it ends; a submission after that raises
    ``trio.ClosedResourceError``.

Error handling:
    An exception raised by one operation is re-raised to its own caller only. If the
    commit itself fails (disk full, I/O error), every caller of that batch gets the
    exception: none of their writes happened. ``on_commit`` callbacks run on the Trio
    thread, in submission order, only after a successful commit; they must not block.
    Then, if the transaction changed rows, the writer publishes it on its
    :class:`~sessionmem.storage.commits.CommitSignal` (the store's "something was stored"),
    with the kinds of rows its writes that succeeded declared (``stores``): once per
    transaction, on the Trio thread, never for a failed commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

import apsw
import msgspec
import trio

from sessionmem.storage.commits import CommitSignal, Stored

T = TypeVar("T")
A = TypeVar("A")
MAX_BATCH = 512
# Background work in one transaction: ~64 observation rows, about 10 ms of the writer.
BACKGROUND_WEIGHT = 64
# ...and in one that carries requests, which wait for its commit: one actor's batch (8 rows).
REQUEST_BACKGROUND_WEIGHT = 8


# Runs the writes of one kind together (arguments of type A): one result for each argument, in their order.
Together = Callable[[apsw.Connection, list[A]], list[T]]


class _Operation(Generic[T]):
    __slots__ = ("fn", "on_commit", "weight", "stores", "together", "argument", "done", "result", "error")
    # Set when ``fn`` (or its ``together`` run) returns, and read only then: once ``done``, if ``error`` is None.
    result: T

    def __init__(self, fn: Callable[[apsw.Connection], T], on_commit: Callable[[T], None] | None,
                 weight: int = 1, stores: int = 0, together: Together[Any, T] | None = None,
                 argument: Any = None) -> None:
        self.fn = fn
        self.on_commit = on_commit
        self.weight = weight
        self.stores = stores  # the kinds of rows it may store (Stored bits), for the commit signal
        self.together = together
        self.argument = argument
        self.done = trio.Event()
        self.error: BaseException | None = None


def _take_into(batch: list[_Operation[Any]], receive: trio.MemoryReceiveChannel[_Operation[Any]],
               most: int) -> bool:
    """Move up to ``most`` waiting operations into ``batch``; whether the channel is closed and empty."""
    while len(batch) < most:
        try:
            batch.append(receive.receive_nowait())
        except trio.WouldBlock:
            return False
        except trio.EndOfChannel:
            return True
    return False


class _TransactionLost(Exception):
    """SQLite rolled the transaction back on its own; ``cause`` is the error that made it."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class WriterStatistics(msgspec.Struct, frozen=True):
    batches: int  # group commits
    operations: int  # submissions committed in them
    largest_batch: int
    queued: int  # submissions waiting for the next batch (both lanes)
    failed_commits: int
    slowest_commit_ms: float
    commits_over_20ms: int
    background_queued: int = 0  # of which background work
    request_wait_ms: float = 0.0  # how long the oldest request not yet in a transaction has waited


class GroupCommitWriter:
    def __init__(self, connection: apsw.Connection, *, max_batch: int = MAX_BATCH,
                 background_weight: int = BACKGROUND_WEIGHT,
                 request_background_weight: int = REQUEST_BACKGROUND_WEIGHT,
                 commits: CommitSignal | None = None) -> None:
        self._connection = connection
        self.commits = commits or CommitSignal()  # published after each commit that changed rows
        self._max_batch = max_batch
        self._background_weight = background_weight
        self._request_background_weight = min(request_background_weight, background_weight)
        self._send, self._receive = trio.open_memory_channel[_Operation[Any]](max_batch * 4)
        self._background_send, self._background_receive = trio.open_memory_channel[_Operation[Any]](max_batch * 4)
        self._held: _Operation[Any] | None = None  # background work taken but over the last batch's weight
        # Requests sent and not yet taken into a transaction, oldest first, with when they were submitted.
        self._waiting: dict[_Operation[Any], float] = {}
        self._wake = trio.Event()
        self._limiter = trio.CapacityLimiter(1)
        self._batches = self._operations = self._largest_batch = 0
        self._failed_commits = self._commits_over_20ms = 0
        self._slowest_commit_ms = 0.0

    def statistics(self) -> WriterStatistics:
        background = self._background_send.statistics().current_buffer_used + (self._held is not None)
        return WriterStatistics(
            batches=self._batches,
            operations=self._operations,
            largest_batch=self._largest_batch,
            queued=self._send.statistics().current_buffer_used + background,
            failed_commits=self._failed_commits,
            slowest_commit_ms=round(self._slowest_commit_ms, 2),
            commits_over_20ms=self._commits_over_20ms,
            background_queued=background,
            request_wait_ms=round(self._request_wait_s() * 1000, 1),
        )

    def _request_wait_s(self) -> float:
        """How long the oldest request not yet taken into a transaction has waited; 0 with none waiting."""
        for submitted in self._waiting.values():
            return trio.current_time() - submitted
        return 0.0

    async def submit(self, fn: Callable[[apsw.Connection], T], *, on_commit: Callable[[T], None] | None = None,
                     background: bool = False, weight: int = 1, stores: Stored = Stored.NOTHING) -> T:
        """Run ``fn(connection)`` in the next group commit and return its result once durable.

        ``background``: nobody waits on a request for it (module docstring); ``weight``:
        its size in observation rows or the like (background work only); ``stores``: the
        kinds of rows it may store, which its commit publishes.

        A caller cancelled while waiting does not withdraw its operation: once sent it
        will be committed, so an accepted event is never half-written.
        """
        return await self._submit(_Operation(fn, on_commit, max(1, weight), int(stores)), background)

    async def submit_together(self, together: Together[A, T], argument: A, *,
                              on_commit: Callable[[T], None] | None = None, background: bool = False,
                              weight: int = 1, stores: Stored = Stored.NOTHING) -> T:
        """Run ``together(connection, [argument])[0]`` in the next group commit, as :meth:`submit`,
        and in one call of ``together`` with the arguments of every submission beside it (in
        the same transaction, one after the other) that names the same function.

        ``together`` must give the same results as called on each argument alone, in turn:
        when a transaction must be run again one operation at a time (one of them failed),
        each is.
        """
        operation = _Operation(partial(_alone, together, argument=argument), on_commit, max(1, weight), int(stores),
                               together, argument)
        return await self._submit(operation, background)

    async def _submit(self, operation: _Operation[T], background: bool) -> T:
        send = self._background_send if background else self._send
        if not background:
            self._waiting[operation] = trio.current_time()
        try:
            try:
                send.send_nowait(operation)  # the common case: no extra scheduling round
            except trio.WouldBlock:
                await send.send(operation)
        except BaseException:  # not sent (cancelled, or the writer closed): it is not waiting
            self._waiting.pop(operation, None)
            raise
        self._wake.set()
        await operation.done.wait()
        if operation.error is not None:
            raise operation.error
        return operation.result

    async def run_alone(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn(connection)`` between two group commits, outside any transaction (VACUUM, say).

        Its errors are its caller's alone. Like a commit, it is never abandoned on a thread.
        """
        return await trio.to_thread.run_sync(fn, self._connection, limiter=self._limiter)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve submissions until :meth:`close`, then commit what was queued and return."""
        task_status.started()
        with self._receive, self._background_receive:
            while True:
                self._wake = trio.Event()  # before taking: a submission after this wakes us
                batch, ended = self._take()
                if batch:
                    await self._run_batch(batch)
                elif ended:
                    return
                else:
                    await self._wake.wait()

    def _take(self) -> tuple[list[_Operation[Any]], bool]:
        """The next batch (module docstring), and whether both lanes are closed and empty."""
        batch: list[_Operation[Any]] = []
        requests_ended = _take_into(batch, self._receive, self._max_batch)
        for request in batch:
            self._waiting.pop(request, None)
        most = self._request_background_weight if batch else self._background_weight
        weight, background_ended = 0, False
        while weight < most:
            operation, self._held = self._held, None
            if operation is None:
                try:
                    operation = self._background_receive.receive_nowait()
                except trio.WouldBlock:
                    break
                except trio.EndOfChannel:
                    background_ended = True
                    break
            if weight and weight + operation.weight > most:
                self._held = operation  # first in the next batch
                break
            batch.append(operation)
            weight += operation.weight
        return batch, requests_ended and background_ended and self._held is None

    def close(self) -> None:
        """Stop taking submissions; queued ones are still committed before ``run`` returns."""
        self._send.close()
        self._background_send.close()
        self._wake.set()

    async def _run_batch(self, batch: list[_Operation[Any]]) -> None:
        started = time.perf_counter()
        try:
            # Shielded: a commit that started must be reported to its callers (and its
            # on_commit run) even during shutdown, or an accepted event could go undelivered.
            with trio.CancelScope(shield=True):
                changed = await trio.to_thread.run_sync(self._commit_batch, batch, limiter=self._limiter)
        except Exception as exc:  # the commit failed: nothing in this batch happened
            self._failed_commits += 1
            for operation in batch:
                operation.error = exc
        else:
            elapsed_ms = (time.perf_counter() - started) * 1000
            self._slowest_commit_ms = max(self._slowest_commit_ms, elapsed_ms)
            self._commits_over_20ms += elapsed_ms > 20
            self._batches += 1
            self._operations += len(batch)
            self._largest_batch = max(self._largest_batch, len(batch))
            stored = 0
            for operation in batch:
                if operation.error is None:
                    stored |= operation.stores
                    if operation.on_commit is not None:
                        try:
                            operation.on_commit(operation.result)
                        except Exception as exc:  # a broken callback must not strand other callers
                            operation.error = exc
            if changed:
                self.commits.publish(stored)
        finally:
            for operation in batch:
                operation.done.set()

    def _commit_batch(self, batch: list[_Operation[Any]]) -> bool:
        """Commit ``batch`` (module docstring); whether rows changed. The count includes the changes of a
        first try rolled back: at worst a waiter on the commit signal reads and finds nothing new."""
        changes = self._connection.total_changes()
        try:
            # Fast path: one transaction, no per-operation savepoints (they cost two
            # statements each, on every request).
            self._transaction(batch, isolate=False)
            return self._connection.total_changes() != changes
        except Exception:
            pass  # rolled back: redo the batch isolating each operation
        for operation in batch:
            operation.error = None  # (and each result is set again)
        try:
            self._transaction(batch, isolate=True)
        except _TransactionLost as lost:
            raise lost.cause from None  # every caller of the batch gets what failed: nothing was written
        return self._connection.total_changes() != changes

    def _transaction(self, batch: list[_Operation[Any]], *, isolate: bool) -> None:
        connection = self._connection
        # IMMEDIATE: take the write lock up front. A deferred transaction that reads
        # first and writes later fails with SQLITE_BUSY (no retry) if another
        # connection -- the checkpointer, PRAGMA optimize -- wrote in between.
        connection.execute("BEGIN IMMEDIATE")
        try:
            if isolate:
                _run_isolated(connection, batch)
            else:
                _run(connection, batch)
            connection.execute("COMMIT")
        except BaseException:
            if not connection.get_autocommit():
                connection.execute("ROLLBACK")
            raise


def _run(connection: apsw.Connection, batch: list[_Operation[Any]]) -> None:
    """Every operation of ``batch``, those that run together in one call each (the fast path)."""
    for run in _runs_together(batch):
        together = run[0].together
        if together is None or len(run) == 1:
            run[0].result = run[0].fn(connection)
            continue
        results = together(connection, [operation.argument for operation in run])
        if len(results) != len(run):
            raise RuntimeError(f"{together.__qualname__} gave {len(results)} results for {len(run)} writes")
        for operation, result in zip(run, results):
            operation.result = result


def _run_isolated(connection: apsw.Connection, batch: list[_Operation[Any]]) -> None:
    """Every operation of ``batch`` alone, inside its own savepoint: one that fails is undone, and
    only it (its error is its own)."""
    for operation in batch:
        # Not APSW's `with connection`: its clean-up error would hide what really happened.
        connection.execute("SAVEPOINT operation")
        try:
            operation.result = operation.fn(connection)
        except Exception as exc:
            operation.error = exc
            if connection.get_autocommit():
                # SQLite rolled the whole transaction back itself (SQLITE_FULL,
                # SQLITE_IOERR): no operation of this batch happened, and going
                # on would write the rest outside any transaction.
                raise _TransactionLost(exc) from exc
            connection.execute("ROLLBACK TO operation")
        connection.execute("RELEASE operation")


def _alone(together: Together[A, T], connection: apsw.Connection, *, argument: A) -> T:
    (result,) = together(connection, [argument])
    return result


def _runs_together(batch: list[_Operation[Any]]) -> list[list[_Operation[Any]]]:
    """``batch`` cut into runs: consecutive operations of one ``together`` function, each other operation alone."""
    runs: list[list[_Operation[Any]]] = []
    for operation in batch:
        if runs and operation.together is not None and runs[-1][0].together is operation.together:
            runs[-1].append(operation)
        else:
            runs.append([operation])
    return runs
