"""The session pool: sessions opened ahead, each lent to one borrower at a time, given back for the next."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from engram_mcp.conformance._pool import OneAtATime, SessionPool


class Opener:
    """Opens numbered stand-in sessions; those named in ``failing`` fail to open, and each waits for ``release``."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.opened: list[int] = []
        self.failing = failing
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()

    def __call__(self, era: str) -> tuple[str, int]:
        with self._lock:
            number = len(self.opened)
            self.opened.append(number)
        self.release.wait(5)
        if number in self.failing:
            raise ConnectionError("the target refused a session")
        return (era, number)


def _settled(pool: SessionPool[Any], era: str, count: int) -> list[Any]:
    deadline = time.monotonic() + 5
    while len(pool.idle(era)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return pool.idle(era)


def test_reserving_opens_only_what_the_pool_lacks() -> None:
    opener = Opener()
    pool: SessionPool[Any] = SessionPool(opener)
    pool.reserve("legacy", 3)
    pool.reserve("legacy", 4)  # the background checks need one more than the concurrent clients
    pool.reserve("legacy", 2)
    assert len(_settled(pool, "legacy", 4)) == 4
    assert len(opener.opened) == 4, "a reservation opened sessions the pool already had"
    pool.reserve("modern", 1)
    assert _settled(pool, "modern", 1) == [("modern", 4)], "an era drew on another era's sessions"


def test_each_session_is_lent_once_until_it_is_given_back() -> None:
    pool: SessionPool[Any] = SessionPool(Opener())
    pool.reserve("legacy", 2)
    _settled(pool, "legacy", 2)
    first, second = pool.borrow("legacy"), pool.borrow("legacy")
    assert first is not None and second is not None and first != second
    assert pool.borrow("legacy") is None, "the pool lent a session it did not have"
    pool.give_back("legacy", first)
    assert pool.borrow("legacy") == first, "a session given back was not lent again"


def test_a_borrower_waits_for_a_session_being_opened_rather_than_open_its_own() -> None:
    opener = Opener()
    opener.release.clear()
    pool: SessionPool[Any] = SessionPool(opener)
    pool.reserve("legacy", 1)
    threading.Timer(0.1, opener.release.set).start()
    assert pool.borrow("legacy") == ("legacy", 0)


def test_a_session_that_fails_to_open_leaves_its_borrower_to_open_its_own_and_may_be_reserved_again() -> None:
    opener = Opener(failing=frozenset({0}))
    pool: SessionPool[Any] = SessionPool(opener)
    pool.reserve("legacy", 1)
    assert pool.borrow("legacy") is None, "a borrower was handed a session that failed to open"
    pool.reserve("legacy", 1)
    assert pool.borrow("legacy") == ("legacy", 1)


def test_a_closed_pool_wakes_its_waiting_borrowers_and_keeps_nothing_given_back() -> None:
    opener = Opener()
    opener.release.clear()
    pool: SessionPool[Any] = SessionPool(opener)
    pool.reserve("legacy", 1)
    woken: list[BaseException] = []

    def borrow() -> None:
        try:
            pool.borrow("legacy")
        except RuntimeError as closed:
            woken.append(closed)

    waiting = threading.Thread(target=borrow)
    waiting.start()
    time.sleep(0.05)
    pool.close()
    waiting.join(5)
    assert woken, "a borrower waiting on a closed pool was not woken"
    pool.give_back("legacy", ("legacy", 9))
    assert pool.idle("legacy") == [], "a closed pool kept a session given back"
    opener.release.set()
    time.sleep(0.05)
    assert pool.idle("legacy") == [], "a session that opened after the pool closed was kept"
    with pytest.raises(RuntimeError, match="the run is over"):
        pool.borrow("legacy")


def test_sessions_opened_ahead_start_one_at_a_time_in_the_order_asked() -> None:
    running, most, order = [0], [0], []
    lock = threading.Lock()
    finished = threading.Event()

    def job(name: str) -> Any:
        def run() -> None:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02)
            order.append(name)
            with lock:
                running[0] -= 1
            if name == "last":
                finished.set()
            if name == "fails":
                raise ConnectionError("the target would not start")
        return run

    ahead = OneAtATime("test")
    for name in ("raw", "fails", "watched", "pooled", "last"):
        ahead.submit(job(name))
    assert finished.wait(5), "a job after a failing one never ran"
    assert order == ["raw", "fails", "watched", "pooled", "last"]
    assert most[0] == 1, "two sessions were being opened at once"


def test_nothing_starts_once_the_run_is_over() -> None:
    release, ran = threading.Event(), []
    ahead = OneAtATime("test")
    ahead.submit(lambda: release.wait(5))
    ahead.submit(lambda: ran.append("late"))
    ahead.close()
    release.set()
    time.sleep(0.1)
    ahead.submit(lambda: ran.append("after"))
    time.sleep(0.05)
    assert ran == [], "a session was opened after the run ended"
