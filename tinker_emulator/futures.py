"""Where the local backend's work runs, and the futures that hand its results back.

Model work runs on two background threads, so that sampling and training overlap as they do on
Tinker's servers:

- the **training** worker runs every training client's requests (``forward_backward``,
  ``optim_step``, saving, loading, copying weights for a sampler) in submission order, which
  gives Tinker's ordering guarantee for free (a ``forward_backward`` submitted before an
  ``optim_step`` runs before it);
- the **sampling** worker runs sampling batches on its own copy of each base model (its own
  modules over the same base weights), with snapshot adapters copied from the training run at
  the moment they were asked for, so a snapshot never changes while training goes on. (An
  ``inflight`` sampler follows the live training weights, so its batches run on the training
  worker, in order with training.)

Work is queued in *lanes* (the workshop server gives each API key its own, through ``lane``): in
submission order within a lane, in rounds across lanes (each lane with work gives one job per
round), so one tenant's queue of large requests holds back another's small one for at most the
running job plus one job per other lane still due in the round. In one process with no lanes (a
script, a notebook) everything is in one lane: plain submission order.

Each worker owns its copy of a base model, so no model is ever touched by two threads. Results
come back as Tinker's own ``AwaitableConcurrentFuture``, so ``.result()``,
``await f.result_async()`` and ``await f`` behave exactly as with Tinker.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import heapq
import queue
import threading
import warnings
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

T = TypeVar("T")
C = TypeVar("C")

TRAINING = "training"
SAMPLING = "sampling"
ROLES = (TRAINING, SAMPLING)

# the lane that work submitted from this context joins (None: the one lane of a plain process)
LANE: contextvars.ContextVar[Hashable] = contextvars.ContextVar("gemlab_local_lane", default=None)
_BARRIER = object()  # an inbox entry of ``drain``
_CANCEL = object()  # an inbox entry of ``cancel_queued``
_CALLERS = object()  # ``Worker.submit``'s default lane: the caller's ``LANE``


def _nothing() -> None:
    """The job of a ``drain`` barrier."""


@contextlib.contextmanager
def lane(name: Hashable) -> Iterator[None]:
    """Queue the work submitted inside this block (and tasks started from it) in lane ``name``."""
    token = LANE.set(name)
    try:
        yield
    finally:
        LANE.reset(token)


class Worker:
    """One daemon thread that runs submitted jobs one at a time: in submission order within a lane,
    and in rounds across lanes, each lane with work giving one job per round.

    A job's round is its lane's previous job's round plus one, or the round being run now if that
    is later (a lane that was idle joins the current round); the lowest round runs first, ties in
    submission order. So a job of an idle lane waits at most for the running job plus one job of
    each other lane not yet served in this round, and a lane that keeps sending still gets one
    turn per round."""

    def __init__(self, role: str = TRAINING) -> None:
        self.role = role
        # SimpleQueue: its put() is reentrant, so a client's finalizer (run by the garbage
        # collector at any allocation, possibly inside another put) can queue work safely. Only
        # the worker's thread sorts the inbox into rounds, so what follows needs no lock.
        self._inbox: queue.SimpleQueue[tuple[Any, Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._queued: list[tuple[int, int, Callable[[], Any], Future[Any]]] = []  # a heap by (round, seq)
        self._last_round: dict[Hashable, int] = {}  # each lane's latest job's round
        self._round = 0  # the round of the job running now
        self._seq = 0
        self._running = False
        self._thread = threading.Thread(target=self._run, name=f"gemlab-local-{role}", daemon=True)
        self._stopped = False
        self._stopping = False  # the worker's own: ``stop``'s marker has been sorted
        self._thread.start()

    def submit(self, fn: Callable[[], T], lane: Hashable = _CALLERS) -> Future[T]:
        """Queue ``fn`` in ``lane`` (default: the caller's ``LANE``); its result (or exception)
        lands in the returned future. After ``stop`` (interpreter exit) nothing runs: the future
        fails at once."""
        future: Future[T] = Future()
        if self._stopped:
            future.set_exception(RuntimeError("the local backend has shut down (the interpreter is exiting)"))
            return future
        self._inbox.put((LANE.get() if lane is _CALLERS else lane, fn, future))
        return future

    @property
    def busy(self) -> bool:
        """Whether a job is running or waiting (read from other threads: a hint, not a lock)."""
        return self._running or bool(self._queued) or not self._inbox.empty()

    def on_worker_thread(self) -> bool:
        """True inside a job: waiting on another job from here would wait forever."""
        return threading.current_thread() is self._thread

    def drain(self) -> None:
        """Block until every job queued so far, in every lane, has finished."""
        if self._thread.is_alive() and not self.on_worker_thread():
            done: Future[None] = Future()
            self._inbox.put((_BARRIER, _nothing, done))
            done.result()

    def cancel_queued(self) -> None:
        """Cancel every job queued so far and not yet started (a server shutting down): their
        futures fail as cancelled; the job running now finishes."""
        self._inbox.put((_CANCEL, _nothing, Future()))

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread (at interpreter exit). Jobs submitted later,
        e.g. by clients' finalizers during the interpreter's teardown, are refused: a daemon thread
        still running torch while C++ static destructors run aborts the process ("terminate called
        without an active exception")."""
        self.drain()
        self._stopped = True
        self._inbox.put(None)
        if not self.on_worker_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            fn, future = job
            if future.set_running_or_notify_cancel():
                self._running = True
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to whoever waits on the future
                    future.set_exception(exc)
                finally:
                    self._running = False
            del job, fn, future  # drop references before waiting for the next job

    def _next(self) -> tuple[Callable[[], Any], Future[Any]] | None:
        """The next job (``None``: stop): the inbox sorted into rounds (waiting only when nothing
        is queued), then the queued job of the lowest round, the earliest submitted of its round."""
        while True:
            try:
                item = self._inbox.get(block=not self._queued and not self._stopping)
            except queue.Empty:
                break
            if item is None:
                self._stopping = True
                continue
            lane, fn, future = item
            if lane is _CANCEL:
                for *_, queued_fn, queued_future in self._queued:
                    if queued_fn is not _nothing:  # a ``drain`` waiting is kept
                        queued_future.cancel()
                self._queued = [entry for entry in self._queued if entry[2] is _nothing]
                heapq.heapify(self._queued)
                continue
            if lane is _BARRIER:  # after every job queued so far
                job_round = max(self._last_round.values(), default=self._round) + 1
            else:
                job_round = max(self._round, self._last_round.get(lane, self._round - 1) + 1)
                self._last_round[lane] = job_round
            self._seq += 1
            heapq.heappush(self._queued, (job_round, self._seq, fn, future))
        if not self._queued:
            return None
        self._round, _, fn, future = heapq.heappop(self._queued)
        if len(self._last_round) > 64:  # lanes idle since an earlier round would join the current one anyway
            self._last_round = {k: r for k, r in self._last_round.items() if r >= self._round}
        return fn, future


_workers: dict[str, Worker] = {}
# re-entrant: a garbage-collected client's finalizer may ask for a worker while this thread holds it
_worker_lock = threading.RLock()


def get_worker(role: str = TRAINING) -> Worker:
    """The process-wide worker for ``role`` (``"training"`` or ``"sampling"``), started on first
    use; queued work finishes before the interpreter exits."""
    worker = _workers.get(role)
    if worker is not None:
        return worker
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    with _worker_lock:
        if role not in _workers:
            _workers[role] = Worker(role)
            atexit.register(_workers[role].stop)
        return _workers[role]


def worker_busy(role: str) -> bool:
    """Whether ``role``'s worker has work running or waiting (``False`` before it exists)."""
    worker = _workers.get(role)
    return worker is not None and worker.busy


def cancel_queued_work() -> None:
    """Cancel every job queued on every worker and not yet started (the running ones finish)."""
    for worker in tuple(_workers.values()):
        worker.cancel_queued()


def on_a_worker_thread() -> bool:
    """True inside any worker's job (where waiting on that worker would wait forever)."""
    return any(worker.on_worker_thread() for worker in tuple(_workers.values()))


def run_in_order(fn: Callable[[], T]) -> AwaitableConcurrentFuture[T]:
    """Run ``fn`` on the training worker after everything already queued there; a Tinker-style future of it."""
    return AwaitableConcurrentFuture(get_worker(TRAINING).submit(fn))


def then(first: Future[T], worker: Worker, fn: Callable[[T], C]) -> Future[C]:
    """A future of ``fn(result of first)``, run on ``worker`` once ``first`` is done (without
    blocking either worker while it waits). Cancelling it drops the result."""
    out: Future[C] = Future()
    lane = LANE.get()  # ``fn`` joins the caller's lane, though ``start`` runs on another thread

    def relay(done: Future[Any]) -> None:
        if not out.set_running_or_notify_cancel():
            return  # nobody wants the result any more
        error = done.exception()
        if error is not None:
            out.set_exception(error)
        else:
            out.set_result(done.result())

    def start(done: Future[T]) -> None:
        if done.exception() is not None or out.cancelled():
            relay(done)
        else:
            worker.submit(lambda: fn(done.result()), lane).add_done_callback(relay)

    first.add_done_callback(start)
    return out


def completed(value: T) -> AwaitableConcurrentFuture[T]:
    """A future that is already done, for answers that need no model work."""
    future: Future[T] = Future()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


class ClientFuture(AwaitableConcurrentFuture[C], Generic[C]):
    """A future of a client that, like Tinker 0.38's, may still be used as the client itself.

    Tinker's ``create_*`` methods return a future of the client; older code used the return
    value directly. Attribute access is forwarded to the finished client with the same
    ``FutureWarning`` Tinker gives, so such code keeps working unchanged.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        warnings.warn(
            "Using the future as the client is deprecated (as in Tinker 0.38); call .result() on "
            "it, or await it, to get the client first",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self.result(), name)

    def __repr__(self) -> str:
        future = self.future()
        state = "pending" if not future.done() else repr(future.exception() or future.result())
        return f"<{type(self).__name__}: {state}>"


def client_future(fn: Callable[[], C], role: str = TRAINING) -> ClientFuture[C]:
    """Run ``fn`` (which builds a client) on the ``role`` worker; a future usable as the client."""
    return ClientFuture(get_worker(role).submit(fn))
