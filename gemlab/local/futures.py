"""Where the local backend's work runs, and the futures that hand its results back.

All model work (training steps, sampling batches, loading, saving) runs on one background
thread, in submission order. That gives Tinker's ordering guarantee for free (a
``forward_backward`` submitted before an ``optim_step`` runs before it), keeps the caller's
event loop free while the model computes, and lets every client share one copy of each base
model without locks. Results come back as Tinker's own ``AwaitableConcurrentFuture``, so
``.result()``, ``await f.result_async()`` and ``await f`` behave exactly as with Tinker.
"""

from __future__ import annotations

import atexit
import queue
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

T = TypeVar("T")
C = TypeVar("C")


class Worker:
    """One daemon thread that runs submitted jobs one after another, in submission order."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="gemlab-local-worker", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn``; its result (or exception) lands in the returned future."""
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future

    def on_worker_thread(self) -> bool:
        """True inside a job: waiting on another job from here would wait forever."""
        return threading.current_thread() is self._thread

    def drain(self) -> None:
        """Block until every job queued so far has finished (run at interpreter exit)."""
        self._jobs.join()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            try:
                if item is None:
                    return
                fn, future = item
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:  # handed to whoever waits on the future
                        future.set_exception(exc)
            finally:
                self._jobs.task_done()


_worker: Worker | None = None
_worker_lock = threading.Lock()


def get_worker() -> Worker:
    """The process-wide worker, started on first use; queued work finishes before exit."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = Worker()
            atexit.register(_worker.drain)
        return _worker


def run_in_order(fn: Callable[[], T]) -> AwaitableConcurrentFuture[T]:
    """Run ``fn`` on the worker after everything already queued; a Tinker-style future of it."""
    return AwaitableConcurrentFuture(get_worker().submit(fn))


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


def client_future(fn: Callable[[], C]) -> ClientFuture[C]:
    """Run ``fn`` (which builds a client) on the worker; a future usable as the client."""
    return ClientFuture(get_worker().submit(fn))
