"""What a check is, and the statuses it can end in.

A check is a test function of the suite marked with ``@check(id, *requirements)``.
It ends PASS, FAIL (an assertion about the target failed), WARN (the same, when
every requirement it covers is a SHOULD), PIN (only requirements the run's level
does not score failed: this project's pins, at the contract level),
SKIP (not exercised: the target or the profile lacks what the check needs),
N/A (not applicable: a tool without such an argument, an era or transport
without the feature), BLOCKED (a prerequisite failed, so the check could not
be judged), ERROR (the harness or the environment failed — never
blamed on the target) or XFAIL (a failure the baseline expects).

A SKIP counts as *not exercised*: a scored MUST it leaves unjudged makes the run
incomplete, with the SKIP message as the reason, so that message says what would
unlock the check. ``not_applicable`` ends a check N/A instead: the requirement
cannot apply to this run, so nothing is missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, NoReturn, TypeVar

import pytest

from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._needs import ERAS, Needs
from engram_mcp.conformance._words import spoken
from engram_mcp.contract import load

F = TypeVar("F", bound=Callable[..., Any])
CHECK_ID = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*$")


class Status(str, Enum):  # noqa: UP042 - StrEnum would change how statuses format in 3.11
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"
    BLOCKED = "BLOCKED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"
    XPASS = "XPASS"  # a baseline entry that now passes: the baseline is stale
    PIN = "PIN"  # what the check judged held at the run's level; only this project's pins did not
    NA = "N/A"  # not applicable: the requirement has nothing to exercise in this run (never counted as a gap)


# Worst first: a requirement's verdict is the worst status among its checks.
SEVERITY = [
    Status.FAIL,
    Status.ERROR,
    Status.XPASS,
    Status.BLOCKED,
    Status.WARN,
    Status.PIN,
    Status.XFAIL,
    Status.PASS,
    Status.SKIP,
    Status.NA,
]


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=SEVERITY.index) if statuses else Status.SKIP


class Blocked(Exception):
    """A prerequisite of the check failed; the reason names it."""


class HarnessError(ConformanceError):
    """The harness itself could not proceed (bad profile, broken environment)."""


class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined]  # pytest types skip.Exception as an attribute
    """The check cannot apply to this run (a tool, era or transport without the feature): not counted as unexercised."""


def not_applicable(reason: str) -> NoReturn:
    """Stop the check as SKIP, but not applicable: the requirement has nothing to exercise here."""
    raise NotApplicable(reason)


# Set by the plugin from --deep; waits longer than this are left to the deep mode.
SHORT_WAIT_SECONDS = 10.0
_deep = False


def set_deep(enabled: bool) -> None:
    global _deep  # noqa: PLW0603 - one flag per run, set once by the plugin before any check
    _deep = enabled


def is_deep() -> bool:
    return _deep


def needs_deep(seconds: float, what: str) -> None:
    """Skip (not exercised) a wait longer than SHORT_WAIT_SECONDS unless the run is --deep; the reason says how to
    unlock it."""
    if seconds > SHORT_WAIT_SECONDS and not _deep:
        pytest.skip(f"{what} needs a wait of {seconds:g} s: run with --deep, or make it at most "
                    f"{SHORT_WAIT_SECONDS:g} s in the profile")


# Pins judged inside a check, apart from the check's own verdict (see ``pin``).
_pins: dict[str, list[str]] = {}


def pin(requirement_id: str, condition: Any, message: str) -> bool:
    """Judge one *profile* requirement inside a check without failing the check's contract requirements.

    The requirement gets FAIL (with the message) if any pin on it in this check failed, PASS otherwise;
    the check's other requirements keep the check's own status.
    """
    _pins.setdefault(requirement_id, [])
    if not condition:
        _pins[requirement_id].append(message)
    return bool(condition)


def take_pins() -> dict[str, list[str]]:
    """The pins recorded since the last call (the plugin calls it once per check)."""
    global _pins
    taken, _pins = _pins, {}
    return taken


def require(condition: Any, reason: str) -> None:
    """Stop the check as BLOCKED unless a prerequisite holds."""
    if not condition:
        raise Blocked(reason)


def check(check_id: str, *requirements: str, uses: Any = (), cases: Mapping[str, Any] | None = None,
          roles: Any = (), eras: Any = ERAS, unbound: bool = False) -> Callable[[F], F]:
    """Mark a suite function as the check ``check_id`` covering these requirement ids, with what it needs to run
    (``_needs``: the tools it calls, those some cases add, the scope roles it uses, the eras it applies to)."""
    if not CHECK_ID.match(check_id):
        raise ValueError(f"malformed check id {spoken(check_id)}")
    catalog = load().requirements["requirements"]
    known = {r["id"] for r in catalog}
    unknown = [r for r in requirements if r not in known]
    if unknown or not requirements:
        raise ValueError(f"check {check_id} names no requirement the catalog holds: {spoken(unknown)}")
    # A pin split off a contract requirement is exercised by that requirement's checks too.
    split = [r["id"] for r in catalog if r.get("split_from") in requirements and r["id"] not in requirements]
    covered = (*requirements, *split)
    needs = Needs.declared(uses, cases, roles, eras, unbound)

    def mark(fn: F) -> F:
        return pytest.mark.engram_check(check_id, covered, needs)(fn)

    return mark


SOURCES_SCORED = {
    "contract": frozenset({"contract", "wiring"}),
    "pins": frozenset({"contract", "wiring", "pin"}),
}


def levels(requirement_ids: tuple[str, ...]) -> set[str]:
    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    return {catalog[r]["level"] for r in requirement_ids}


def is_should_only(requirement_ids: tuple[str, ...]) -> bool:
    """True when failing these requirements is a WARN, not a FAIL."""
    return levels(requirement_ids) <= {"SHOULD", "SHOULD NOT", "MAY"}
