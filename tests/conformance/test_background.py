"""Background checks: a check's whole body run on a session of its own beside the other checks on a clock."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from engram_mcp.conformance import _background, _head_start
from engram_mcp.conformance._background import SESSION_NOTE, Background, in_background
from engram_mcp.conformance._checks import Blocked
from engram_mcp.conformance._world import Evidence


class FakeWorld:
    """Just what a body and Background.take use: the era, the evidence and which session it is on."""

    def __init__(self, era: str, session: str, evidence: Evidence | None = None) -> None:
        self.era, self.session = era, session
        self.evidence = evidence or Evidence()


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Registers bodies for the test only; returns the log of (check, case, session) each ran with."""
    monkeypatch.setattr(_background, "_BODIES", {})
    monkeypatch.setattr(_background, "_APPLIES", {})
    log: list[tuple[str, str, str]] = []

    @in_background("demo.waits")
    def waits(world: Any, tool: str) -> str:
        log.append(("demo.waits", tool, world.session))
        world.evidence.add("tool", tool)
        return f"{tool}-on-{world.session}"

    @in_background("demo.legacy-only",
                   applies=lambda era, profile, params: era == "legacy" and bool(profile.confirmation_modes))
    def legacy_only(world: Any) -> None:
        log.append(("demo.legacy-only", "", world.session))

    @in_background("demo.refused")
    def refused(world: Any) -> None:
        log.append(("demo.refused", "", world.session))
        raise Blocked("the target refused the call")

    return log


def _side_session(era: str) -> Any:
    return lambda: (lambda seen: FakeWorld(era, "side", seen))


def _wait_for(background: Background, era: str, check_id: str, **params: Any) -> None:
    job = background._jobs[(era, check_id, _background.case_key(params))]
    assert job.done.wait(5), "the background body never ended"


def test_a_body_runs_on_its_own_session_and_its_check_takes_the_outcome_and_evidence(ran: list[Any]) -> None:
    background = Background()
    background.begin("legacy", [("demo.waits", {"era": "legacy", "tool": "forget"}), ("other.check", {})],
                     _side_session("legacy"))
    background.start()
    _wait_for(background, "legacy", "demo.waits", tool="forget")
    world = FakeWorld("legacy", "main")
    assert background.take("demo.waits", world, tool="forget") == "forget-on-side"  # type: ignore[arg-type]  # a stand-in World
    assert world.evidence.items["tool"] == "forget"
    assert SESSION_NOTE in world.evidence.items, "the report does not say the check ran on a session of its own"
    assert ran == [("demo.waits", "forget", "side")], "the check ran its body again"


def test_nothing_runs_before_start_and_a_body_not_started_runs_in_place_once(ran: list[Any]) -> None:
    background = Background()
    background.begin("legacy", [("demo.waits", {"tool": "withdraw"}), ("demo.refused", {})], _side_session("legacy"))
    time.sleep(0.05)
    assert ran == [], "a body ran before the checks on a clock began"
    assert background.take("demo.waits", FakeWorld("legacy", "main"), tool="withdraw") == "withdraw-on-main"  # type: ignore[arg-type]  # a stand-in World
    background.start()
    _wait_for(background, "legacy", "demo.refused")
    assert ran == [("demo.waits", "withdraw", "main"), ("demo.refused", "", "side")]


def test_bodies_run_side_by_side_each_on_its_own_session(ran: list[Any]) -> None:
    opened: list[int] = []
    both_open = threading.Barrier(2, timeout=5)

    def session() -> Any:
        opened.append(1)
        both_open.wait()  # returns only once the other body's session is being opened too
        return lambda seen: FakeWorld("legacy", f"side-{len(opened)}", seen)

    background = Background()
    background.begin("legacy", [("demo.waits", {"tool": "withdraw"}), ("demo.waits", {"tool": "forget"})], session)
    background.start()
    _wait_for(background, "legacy", "demo.waits", tool="withdraw")
    _wait_for(background, "legacy", "demo.waits", tool="forget")
    assert len(opened) == 2 and sorted(tool for _, tool, _ in ran) == ["forget", "withdraw"]


def test_what_a_body_raised_is_raised_in_its_check(ran: list[Any]) -> None:
    background = Background()
    background.begin("modern", [("demo.refused", {"era": "modern"})], _side_session("modern"))
    background.start()
    _wait_for(background, "modern", "demo.refused")
    with pytest.raises(Blocked, match="refused"):
        background.take("demo.refused", FakeWorld("modern", "main"))  # type: ignore[arg-type]  # a stand-in World


def test_a_check_whose_body_is_still_opening_its_session_waits_for_it(ran: list[Any]) -> None:
    release = threading.Event()

    def slow_session() -> Any:
        release.wait(5)
        return lambda seen: FakeWorld("legacy", "side", seen)

    background = Background()
    background.begin("legacy", [("demo.waits", {"tool": "forget"})], slow_session)
    background.start()
    threading.Timer(0.1, release.set).start()
    assert background.take("demo.waits", FakeWorld("legacy", "main"), tool="forget") == "forget-on-side"  # type: ignore[arg-type]  # a stand-in World
    assert ran == [("demo.waits", "forget", "side")]


def test_a_body_whose_session_cannot_open_runs_in_place(ran: list[Any]) -> None:
    def no_session() -> Any:
        raise ConnectionError("the target takes one session at a time")

    background = Background()
    background.begin("legacy", [("demo.waits", {"tool": "forget"})], no_session)
    background.start()
    assert background.take("demo.waits", FakeWorld("legacy", "main"), tool="forget") == "forget-on-main"  # type: ignore[arg-type]  # a stand-in World
    assert ran == [("demo.waits", "forget", "main")]


def test_each_era_and_case_is_its_own_job_and_an_era_begins_once(ran: list[Any]) -> None:
    background = Background()
    cases = [("demo.waits", {"tool": "withdraw"}), ("demo.waits", {"tool": "forget"})]
    background.begin("legacy", cases, _side_session("legacy"))
    background.begin("legacy", cases, _side_session("legacy"))
    background.start()
    background.start()
    _wait_for(background, "legacy", "demo.waits", tool="forget")
    _wait_for(background, "legacy", "demo.waits", tool="withdraw")
    assert sorted(tool for _, tool, _ in ran) == ["forget", "withdraw"]
    # Another era's check finds no job of its own: it runs in place.
    assert background.take("demo.waits", FakeWorld("modern", "main"), tool="forget") == "forget-on-main"  # type: ignore[arg-type]  # a stand-in World


def test_a_case_that_cannot_apply_gets_no_session_and_runs_in_place(ran: list[Any]) -> None:
    """A check not applicable under the era or the profile ends at once in place: opening a session for it (a
    stdio target started again) would only cost time."""
    opened: list[str] = []

    def counting(era: str) -> Any:
        def open_session() -> Any:
            opened.append(era)
            return _side_session(era)()

        return open_session

    applies, refuses = SimpleNamespace(confirmation_modes=("server-initiated",)), SimpleNamespace(confirmation_modes=())
    background = Background()
    background.begin("legacy", [("demo.legacy-only", {})], counting("legacy"), applies)  # type: ignore[arg-type]  # a stand-in profile
    background.begin("modern", [("demo.legacy-only", {})], counting("modern"), applies)  # type: ignore[arg-type]  # a stand-in profile
    other = Background()
    other.begin("legacy", [("demo.legacy-only", {})], counting("legacy"), refuses)  # type: ignore[arg-type]  # a stand-in profile
    background.start()
    other.start()
    _wait_for(background, "legacy", "demo.legacy-only")
    assert opened == ["legacy"], "a case that cannot apply was given a session of its own"
    background.take("demo.legacy-only", FakeWorld("modern", "main"))  # type: ignore[arg-type]  # a stand-in World
    other.take("demo.legacy-only", FakeWorld("legacy", "main"))  # type: ignore[arg-type]  # a stand-in World
    assert sorted(ran) == [("demo.legacy-only", "", "main"), ("demo.legacy-only", "", "main"),
                           ("demo.legacy-only", "", "side")]


class FakeItem:
    """What the suite's ordering hook reads of an item: its markers."""

    def __init__(self, name: str, check_id: str | None, run_last: bool = False) -> None:
        self.name = name
        self._marks = {"engram_check": pytest.mark.engram_check(check_id, ()).mark} if check_id else {}
        if run_last:
            self._marks["engram_run_last"] = pytest.mark.engram_run_last.mark

    def get_closest_marker(self, name: str) -> Any:
        return self._marks.get(name)


def test_the_checks_on_a_clock_run_after_every_other_check_and_before_the_run_wide_ones(
    ran: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background body starts with the first check on a clock; no check that reads a scope may come after it."""
    from engram_mcp.conformance.suite import conftest

    monkeypatch.setattr(_head_start, "_OPENINGS", {"demo.opened": lambda world: None})

    items = [FakeItem("waits-legacy", "demo.waits"), FakeItem("search-legacy", "search.paging"),
             FakeItem("run-wide", "envelope.codes", run_last=True), FakeItem("refused-modern", "demo.refused"),
             FakeItem("search-modern", "search.paging"), FakeItem("head-start", "demo.opened")]
    conftest.pytest_collection_modifyitems(items)  # type: ignore[arg-type]  # FakeItems: only their markers are read
    assert [item.name for item in items] == ["search-legacy", "search-modern", "waits-legacy", "refused-modern",
                                             "head-start", "run-wide"]
