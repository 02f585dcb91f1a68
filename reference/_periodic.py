"""A task run every few seconds on a daemon thread, for the server's background upkeep."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class Periodic:
    """Runs a task every ``interval`` seconds until stopped; a failure is logged and waits for the next tick."""

    def __init__(self, task: Callable[[], object], *, name: str) -> None:
        self._task, self._name = task, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval: float, *, at_once: bool = False) -> None:
        """Begin ticking; ``at_once`` runs the task first without waiting (e.g. to resume work after a restart)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(interval, at_once), name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self, interval: float, at_once: bool) -> None:
        if at_once:
            self._tick()
        while not self._stop.wait(interval):
            self._tick()

    def _tick(self) -> None:
        try:
            self._task()
        except Exception:
            logging.getLogger("engram_mcp.reference").exception("%s failed; retried at the next tick", self._name)
