"""Discrete-event engine: one heap of (time_ns, seq, callback, argument).

Time is a float in nanoseconds. Events at the same time run in the order they
were scheduled (the sequence number breaks ties), so a run is a pure function
of its inputs and seed.
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count


class Engine:
    """The simulation clock and event queue.

    ``at(t, fn, arg)`` runs ``fn(arg)`` at time ``t``; ``run()`` drains the
    queue. ``stop()`` may be called from a callback to end the run early.
    """

    __slots__ = ("now", "_queue", "_seq", "events", "_stopped", "push")

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list = []
        self._seq = count()
        self.events = 0
        self._stopped = False
        queue, seq = self._queue, self._seq

        def push(time_ns: float, fn, arg=None) -> None:
            """``at()`` without the past-time check, for the fabric's hot path."""
            heappush(queue, (time_ns, next(seq), fn, arg))

        self.push = push

    def at(self, time_ns: float, fn, arg=None) -> None:
        if time_ns < self.now:
            raise ValueError(f"event scheduled in the past: {time_ns} < {self.now}")
        heappush(self._queue, (time_ns, next(self._seq), fn, arg))

    def after(self, delay_ns: float, fn, arg=None) -> None:
        self.at(self.now + delay_ns, fn, arg)

    def stop(self) -> None:
        self._stopped = True

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float | None = None, progress=None, progress_every: int = 20000) -> None:
        """Run events until the queue is empty, ``until`` is reached or ``stop()``.

        ``progress(now)`` is called every ``progress_every`` events.
        """
        queue = self._queue
        pop = heappop
        limit = float("inf") if until is None else until
        self._stopped = False
        count = 0
        while queue and not self._stopped:
            if queue[0][0] > limit:
                break
            time_ns, _, fn, arg = pop(queue)
            self.now = time_ns
            fn(arg)
            count += 1
            if progress is not None and count % progress_every == 0:
                progress(time_ns)
        self.events += count
        if until is not None and not self._stopped and self.now < until and not queue:
            self.now = until
