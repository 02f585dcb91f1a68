"""Head starts: a check's opening calls made when its era begins, judged later in the check itself."""

from __future__ import annotations

from typing import Any

import pytest

from engram_mcp.conformance import _head_start
from engram_mcp.conformance._checks import Blocked
from engram_mcp.conformance._head_start import HeadStarts, head_start
from engram_mcp.conformance._world import Evidence


class FakeWorld:
    """Just what an opening and HeadStarts.take use: the era and the evidence."""

    def __init__(self, era: str, evidence: Evidence | None = None) -> None:
        self.era = era
        self.evidence = evidence or Evidence()


@pytest.fixture
def openings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Registers two openings for the test only; returns the log of the eras they were opened in."""
    monkeypatch.setattr(_head_start, "_OPENINGS", {})
    opened: list[str] = []

    @head_start("demo.works")
    def works(world: Any) -> str:
        opened.append(world.era)
        world.evidence.add("opened_in", world.era)
        return f"state-{world.era}"

    @head_start("demo.blocked")
    def blocked(world: Any) -> None:
        opened.append("blocked-" + world.era)
        raise Blocked("the opening call was refused")

    return opened


def test_an_opening_begun_with_its_era_is_taken_by_its_check_with_its_evidence(openings: list[str]) -> None:
    starts = HeadStarts()
    starts.begin("legacy", {"demo.works", "other.check"}, lambda seen: FakeWorld("legacy", seen))  # type: ignore[arg-type, return-value]  # a stand-in World
    assert openings == ["legacy"]
    world = FakeWorld("legacy")
    assert starts.take("demo.works", world) == "state-legacy"  # type: ignore[arg-type]  # a stand-in World
    assert world.evidence.items == {"opened_in": "legacy"}
    assert openings == ["legacy"], "the check opened again although its era had opened it"


def test_an_era_begins_once_and_opens_only_the_checks_selected(openings: list[str]) -> None:
    starts = HeadStarts()
    make = lambda seen: FakeWorld("modern", seen)  # noqa: E731 - one maker for both calls below
    starts.begin("modern", {"demo.works"}, make)  # type: ignore[arg-type]  # make gives a FakeWorld
    starts.begin("modern", {"demo.works", "demo.blocked"}, make)  # type: ignore[arg-type]  # make gives a FakeWorld
    assert openings == ["modern"]


def test_what_an_opening_raised_is_raised_in_its_check(openings: list[str]) -> None:
    starts = HeadStarts()
    starts.begin("legacy", {"demo.blocked"}, lambda seen: FakeWorld("legacy", seen))  # type: ignore[arg-type, return-value]  # a stand-in World
    with pytest.raises(Blocked, match="refused"):
        starts.take("demo.blocked", FakeWorld("legacy"))  # type: ignore[arg-type]  # a stand-in World


def test_a_check_whose_era_did_not_open_it_opens_itself(openings: list[str]) -> None:
    starts = HeadStarts()
    starts.begin("legacy", {"demo.works"}, lambda seen: FakeWorld("legacy", seen))  # type: ignore[arg-type, return-value]  # a stand-in World
    assert starts.take("demo.works", FakeWorld("modern")) == "state-modern"  # type: ignore[arg-type]  # a stand-in World
    assert openings == ["legacy", "modern"]


def test_wait_until_sleeps_only_what_is_left() -> None:
    assert _head_start.wait_until(0.0) == 0.0  # a moment long past: no wait at all
