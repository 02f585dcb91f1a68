"""The embedded store's group commit: units of work from concurrent callers share one commit (one disk sync), each
caller is answered only after the commit that holds its unit, and a unit that fails rolls back alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engram_mcp.reference._journal import append_event, journal_problems
from engram_mcp.reference._ports import Scope, StoreTransaction
from engram_mcp.reference._store import Store

SCOPE = Scope("tenant-a", "workspace-1")
QUEUED = 8  # callers that arrive while the first unit holds the writers' lock
FAILING = 3  # the caller whose unit raises after writing


class Timeline:
    """What happened, in order: units run (in the committing thread), commits (seen by the connection's trace)
    and answers (in each caller's thread)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._lock = threading.Lock()

    def log(self, event: str) -> None:
        with self._lock:
            self.events.append(event)

    def trace(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.log("commit")


def unit_of(n: int, timeline: Timeline, holding: threading.Event, release: threading.Event
            ) -> Callable[[StoreTransaction], int]:
    def unit(tx: StoreTransaction) -> int:
        if n == 0:  # the first caller holds the writers' lock until the others are queued behind it
            holding.set()
            release.wait(30)
        cursor, _ = append_event(tx, SCOPE, {"operation": "capture", "n": n})
        timeline.log(f"unit {n}")
        if n == FAILING:
            raise RuntimeError(f"unit {n} refused after writing")
        return cursor

    return unit


def test_callers_that_wait_share_a_commit_and_are_answered_after_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    timeline = Timeline()
    with store.write() as db:
        db.set_trace_callback(timeline.trace)
    timeline.events.clear()
    holding, release = threading.Event(), threading.Event()
    answers: dict[int, int | str] = {}

    def caller(n: int) -> None:
        try:
            answers[n] = store.transaction(unit_of(n, timeline, holding, release))
        except RuntimeError as problem:
            answers[n] = str(problem)
        timeline.log(f"answer {n}")

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(QUEUED + 1)]
    try:
        threads[0].start()
        assert holding.wait(30)
        for thread in threads[1:]:
            thread.start()
        time.sleep(0.3)  # the queued callers reach the group commit; a late one would only start a batch of its own
        release.set()
        for thread in threads:
            thread.join(60)
        events = timeline.events
        assert events.count("commit") < QUEUED, events  # without group commit: one per unit that did not fail, 8
        for n in range(QUEUED + 1):
            if n != FAILING:  # answered only once its unit is committed
                assert "commit" in events[events.index(f"unit {n}"):events.index(f"answer {n}")], (n, events)
        assert answers[FAILING] == f"unit {FAILING} refused after writing"
        with store.snapshot() as reader:
            journal = [entry.event["n"] for entry in reader.journal()]
            assert journal_problems(reader) == []
        assert sorted(journal) == [n for n in range(QUEUED + 1) if n != FAILING]  # its row rolled back alone
        assert sorted(answers[n] for n in journal) == list(range(1, QUEUED + 1))  # the others' cursors
    finally:
        release.set()
        store.close()


def test_a_lone_failing_unit_rolls_back_and_raises_its_own_exception(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")

    def fail(tx: StoreTransaction) -> None:
        append_event(tx, SCOPE, {"operation": "capture"})
        raise KeyError("its own")

    try:
        with pytest.raises(KeyError, match="its own"):
            store.transaction(fail)
        with store.snapshot() as reader:
            assert list(reader.journal()) == []
        assert store.transaction(lambda tx: append_event(tx, SCOPE, {"operation": "capture"})[0]) == 1
    finally:
        store.close()


def test_a_unit_that_starts_another_is_refused_rather_than_left_waiting(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")

    def nested(tx: StoreTransaction) -> None:
        append_event(tx, SCOPE, {"operation": "capture"})
        store.transaction(lambda inner: None)

    try:
        with pytest.raises(RuntimeError, match="cannot start another"):
            store.transaction(nested)
        with store.snapshot() as reader:
            assert list(reader.journal()) == []  # the outer unit rolled back with it
    finally:
        store.close()
