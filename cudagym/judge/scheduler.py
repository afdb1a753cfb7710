"""Fair dispatch of GPU jobs: round robin over clients, a bounded number in flight, per-client caps.

Many envs share one judge; without care, one env that queues many jobs (a trainer's rollout worker, a
vector env's burst of ``submit`` calls) fills every GPU lane ahead of the others. The pipeline therefore
hands ready jobs (built, baselines known) to a :class:`FairDispatcher`, which keeps just enough jobs in the
worker pool to keep every GPU busy (``capacity``: one running and one waiting per GPU by default) and
picks the next job from the clients in turn, so no env starves. Jobs of the ``priority`` class (the
baseline jobs other candidates wait for) go first.

:class:`ClientCaps` is the back-pressure: each client (one judge handle: one env, or one remote peer) may
have at most ``cap`` unfinished jobs; ``submit`` waits for a slot beyond that.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from cudagym.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class _Item:
    client: str
    start: Callable[[], Future[Any]]
    on_cancel: Callable[[], None]


class FairDispatcher:
    """Starts queued jobs round robin over clients, at most ``capacity`` at a time; thread-safe.

    Args:
        capacity: Jobs in flight at once (in the worker pool: running or waiting in a GPU's lane).
    """

    PRIORITY = "\x00priority"

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._queues: OrderedDict[str, deque[_Item]] = OrderedDict()  # queued jobs per client
        self._served: dict[str, int] = {}  # when each client last had a job started
        self._tick = 0
        self._running = 0
        self._pumping = False
        self._again = False
        self.capacity = max(1, capacity)

    @property
    def running(self) -> int:
        """Jobs started and not finished."""
        return self._running

    def queued(self, client: str | None = None) -> int:
        """Jobs waiting (of one client when given)."""
        with self._lock:
            if client is not None:
                return len(self._queues.get(client, ()))
            return sum(len(q) for q in self._queues.values())

    def set_capacity(self, capacity: int) -> None:
        """Change how many jobs may be in flight (the GPUs became known)."""
        with self._lock:
            self.capacity = max(1, capacity)
        self._pump()

    def put(self, client: str, start: Callable[[], Future[Any]], on_cancel: Callable[[], None], *,
            priority: bool = False) -> None:
        """Queue a job: ``start()`` launches it and returns its future; ``on_cancel()`` runs if it is dropped."""
        key = self.PRIORITY if priority else client
        with self._lock:
            self._queues.setdefault(key, deque()).append(_Item(client, start, on_cancel))
        self._pump()

    def cancel(self, client: str) -> int:
        """Drop the client's queued jobs (running ones finish); returns how many were dropped."""
        with self._lock:
            dropped = list(self._queues.pop(client, ()))
            self._served.pop(client, None)
            priority = self._queues.get(self.PRIORITY)
            if priority:
                dropped += [item for item in priority if item.client == client]
                self._queues[self.PRIORITY] = deque(item for item in priority if item.client != client)
        for item in dropped:
            item.on_cancel()
        return len(dropped)

    def cancel_all(self) -> int:
        """Drop every queued job (the judge closes)."""
        with self._lock:
            clients = list(self._queues)
        return sum(self.cancel(c) for c in clients)

    def _next(self) -> _Item | None:
        priority = self._queues.get(self.PRIORITY)
        if priority:
            return priority.popleft()
        waiting = [c for c, q in self._queues.items() if q and c != self.PRIORITY]
        if not waiting:
            return None
        client = min(waiting, key=lambda c: self._served.get(c, -1))  # the client served longest ago goes first
        queue = self._queues[client]
        item = queue.popleft()
        self._tick += 1
        self._served[client] = self._tick
        if not queue:
            del self._queues[client]
        return item

    def _pump(self) -> None:
        with self._lock:
            if self._pumping:  # another frame or thread is starting jobs: it will look again
                self._again = True
                return
            self._pumping = True
        while True:
            with self._lock:
                item = self._next() if self._running < self.capacity else None
                if item is None:
                    if self._again:
                        self._again = False
                        continue
                    self._pumping = False
                    return
                self._running += 1
            self._launch(item)

    def _launch(self, item: _Item) -> None:
        try:
            future = item.start()
        except Exception:  # start() reports its own errors in its future; this is a last resort
            log.exception("a GPU job of client %s failed to start", item.client)
            item.on_cancel()
            self._done()
            return
        future.add_done_callback(lambda _f: self._done())

    def _done(self) -> None:
        with self._lock:
            self._running -= 1
        self._pump()


class ClientCaps:
    """At most ``cap`` unfinished jobs per client; :meth:`acquire` waits for a slot.

    Args:
        cap: Unfinished jobs a client may have (in the build stage, queued or running).
    """

    def __init__(self, cap: int) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ConfigError(f"expected max_queued_per_env to be an int >= 1, got {cap!r}")
        self.cap = cap
        self._counts: dict[str, int] = {}
        self._cond = threading.Condition()

    def acquire(self, client: str, closed: Callable[[], bool]) -> None:
        """Take a slot for ``client``, waiting while it has ``cap`` unfinished jobs (or until ``closed()``)."""
        with self._cond:
            while self._counts.get(client, 0) >= self.cap and not closed():
                self._cond.wait(timeout=0.5)
            self._counts[client] = self._counts.get(client, 0) + 1

    def release(self, client: str) -> None:
        """A job of ``client`` finished."""
        with self._cond:
            left = self._counts.get(client, 0) - 1
            if left > 0:
                self._counts[client] = left
            else:
                self._counts.pop(client, None)
            self._cond.notify_all()

    def pending(self, client: str) -> int:
        """Unfinished jobs of ``client``."""
        with self._cond:
            return self._counts.get(client, 0)
