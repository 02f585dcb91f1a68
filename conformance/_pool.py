"""Sessions opened ahead and shared in turn: the pool a run's concurrent clients and background checks draw on.

Starting a stdio target costs most of a second of CPU. The concurrent clients
(explore.concurrent) and the background checks each need sessions of their own,
but never at the same time: the background checks run after every other check.
So each era has one pool. The run reserves as many sessions as the larger of the
two needs, and they start while the first checks run. The concurrent clients
borrow theirs and give back those still sound, and the background checks borrow
them again. Nothing else ever shares a session with a check that borrowed it.

The pool only saves time. A borrower that finds nothing idle and nothing being
opened gets ``None`` and opens a session of its own, and a session that failed to
open is simply not in the pool.

Sessions opened ahead start one at a time (``OneAtATime``), in the order they were
asked for. Started all at once, a run's dozen targets (and several runs side by
side, as the catalogs run them) took the CPU from the sessions the first checks
use, long enough for a first call to time out.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from typing import Generic, TypeVar

Session = TypeVar("Session")


class OneAtATime:
    """Runs the jobs handed to it one after another, in order, on one thread of its own; none after ``close``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: list[Callable[[], object]] = []
        self._worker: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], object]) -> None:
        with self._lock:
            if self._closed:
                return
            self._jobs.append(job)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True, name=self._name)
                self._worker.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._jobs:
                    self._worker = None
                    return
                job = self._jobs.pop(0)
            with contextlib.suppress(Exception):  # a session that fails to open is met again by whoever asks for it
                job()

    def close(self) -> None:
        """Start no more jobs (the run is over: a session it would open is not wanted)."""
        with self._lock:
            self._closed = True
            self._jobs = []


class SessionPool(Generic[Session]):
    """Per era, sessions opened ahead by ``open_session(era)`` and lent out one borrower at a time."""

    def __init__(self, open_session: Callable[[str], Session],
                 start: Callable[[Callable[[], None]], None] | None = None) -> None:
        """``start(job)`` runs a job that opens one session, now or later (default: at once, on a thread)."""
        self._open_session = open_session
        self._start = start or (lambda job: threading.Thread(target=job, daemon=True, name="pooled-session").start())
        self._idle: dict[str, list[Session]] = {}
        self._opening: Counter[str] = Counter()  # era -> sessions being opened for the pool
        self._owned: Counter[str] = Counter()  # era -> sessions the pool opened or is opening (idle or lent)
        self._closed = False
        self._changed = threading.Condition()

    def reserve(self, era: str, count: int) -> None:
        """Make the pool own at least ``count`` sessions in ``era``, opening the missing ones in threads now."""
        with self._changed:
            if self._closed:
                return
            missing = max(0, count - self._owned[era])
            self._owned[era] += missing
            self._opening[era] += missing
        for _ in range(missing):
            self._start(lambda: self._open_one(era))

    def _open_one(self, era: str) -> None:
        try:
            session = self._open_session(era)
        except Exception:  # the borrower that would have had it opens its own, and meets the failure itself
            with self._changed:
                self._opening[era] -= 1
                self._owned[era] -= 1
                self._changed.notify_all()
            return
        with self._changed:
            self._opening[era] -= 1
            if not self._closed:  # else the run closes it with the others it opened
                self._idle.setdefault(era, []).append(session)
            self._changed.notify_all()

    def borrow(self, era: str) -> Session | None:
        """An idle session of the era, waiting for one being opened; None when the pool has none to give."""
        with self._changed:
            while True:
                if self._closed:
                    raise RuntimeError("the run is over: no session is lent now")  # as a session opened now would
                if self._idle.get(era):
                    return self._idle[era].pop()
                if not self._opening[era]:
                    return None
                self._changed.wait()

    def give_back(self, era: str, session: Session) -> None:
        """Return a borrowed session that is still sound, for the next borrower."""
        with self._changed:
            if not self._closed:
                self._idle.setdefault(era, []).append(session)
                self._changed.notify_all()

    def idle(self, era: str) -> list[Session]:
        with self._changed:
            return list(self._idle.get(era, ()))

    def close(self) -> None:
        """Lend nothing more and wake every waiting borrower (the run closes the sessions themselves)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
