"""What a check is, and the statuses it can end in.

A check is a test function of the suite marked with ``@check(id, *requirements)``.
It ends PASS, FAIL (an assertion about the target failed), WARN (the same, when
every requirement it covers is a SHOULD), SKIP (not applicable per the
profile), BLOCKED (a prerequisite failed, so the check could not be judged),
ERROR (the harness or the environment failed — never blamed on the target) or
XFAIL (a failure the baseline expects).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

import pytest

from engram_mcp.contract import load

F = TypeVar("F", bound=Callable[..., Any])
CHECK_ID = re.compile(r"^[a-z0-9]+([.-][a-z0-9]+)*$")


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"
    BLOCKED = "BLOCKED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"
    XPASS = "XPASS"  # a baseline entry that now passes: the baseline is stale


# Worst first: a requirement's verdict is the worst status among its checks.
SEVERITY = [Status.FAIL, Status.ERROR, Status.XPASS, Status.BLOCKED, Status.WARN, Status.XFAIL, Status.PASS, Status.SKIP]


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=SEVERITY.index) if statuses else Status.SKIP


class Blocked(Exception):
    """A prerequisite of the check failed; the reason names it."""


class HarnessError(Exception):
    """The harness itself could not proceed (bad profile, broken environment)."""


def require(condition: Any, reason: str) -> None:
    """Stop the check as BLOCKED unless a prerequisite holds."""
    if not condition:
        raise Blocked(reason)


def check(check_id: str, *requirements: str) -> Callable[[F], F]:
    """Mark a suite function as the check ``check_id`` covering these requirement ids."""
    if not CHECK_ID.match(check_id):
        raise ValueError(f"malformed check id {check_id!r}")
    known = {r["id"] for r in load().requirements["requirements"]}
    unknown = [r for r in requirements if r not in known]
    if unknown or not requirements:
        raise ValueError(f"check {check_id} names unknown requirements {unknown}")

    def mark(fn: F) -> F:
        return pytest.mark.engram_check(check_id, tuple(requirements))(fn)

    return mark


def levels(requirement_ids: tuple[str, ...]) -> set[str]:
    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    return {catalog[r]["level"] for r in requirement_ids}


def is_should_only(requirement_ids: tuple[str, ...]) -> bool:
    """True when failing these requirements is a WARN, not a FAIL."""
    return levels(requirement_ids) <= {"SHOULD", "SHOULD NOT", "MAY"}
