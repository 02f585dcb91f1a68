"""From a check's outcome to its status, and the baseline of expected failures.

A check concludes by returning (PASS), failing an assertion (FAIL, or WARN
when every requirement it covers is a SHOULD), being stopped (BLOCKED, SKIP)
or breaking in the harness itself (ERROR). The baseline then turns an expected
FAIL or WARN into XFAIL, and an expected check that passed into XPASS, so a
stale baseline is noticed.
"""

from __future__ import annotations

import re

import pytest

from engram_mcp.conformance._checks import Blocked, NotApplicable, Status, is_should_only
from engram_mcp.conformance._connect import leaf_exceptions
from engram_mcp.conformance._ids import read_baseline  # noqa: F401 - the plugin reads the baseline from here
from engram_mcp.conformance._words import clipped

MESSAGE_LIMIT = 500  # one line of verdict, never a whole assertion dump
HARNESS_ERROR_LIMIT = 300
DETAIL_LINES = 60  # a failure's detail (the lines after its verdict) kept for the reports, at most
DETAIL_CHARS = 8000
_PYTEST_EXPLANATION = "assert "  # pytest's rewritten assert appends its own explanation, from a line like this
# pytest's diff hints, which mean something else in this CLI (-v lists every check): never part of a verdict.
_PYTEST_HINTS = re.compile(
    r"Use -v to get more diff|use -vv to show|^\s*(Full diff:|Omitting \d+ identical items|At index \d+ diff:)")
UNMET = "a condition of the check did not hold"  # when neither the assertion nor the check says which


def expected_to_fail(baseline: frozenset[str], check_id: str, era: str | None, case: str | None = None) -> bool:
    """Whether the baseline names this check, from the whole check down to one case in one era."""
    names = {check_id}
    if era:
        names.add(f"{check_id}@{era}")
        if case:
            names.add(f"{check_id}@{era}[{case}]")
    return not names.isdisjoint(baseline)


def _skip_reason(error: BaseException) -> str:
    return str(getattr(error, "msg", None) or error)


def verdict(error: AssertionError, unmet: str = "") -> str:
    """A failed assertion's one-line verdict: its own message, never pytest's introspection of it.

    A bare ``assert`` (the suite has none; a test keeps it so) says only how pytest rewrote it
    (``assert ('result' == 'result'``); the verdict is then ``unmet``, a sentence about the target."""
    first = str(error).split("\n")[0].strip()
    if not first or first.startswith(_PYTEST_EXPLANATION) or _PYTEST_HINTS.search(first):
        first = f"not met: {unmet}" if unmet else UNMET
    return clipped(first, MESSAGE_LIMIT)


def outcome_status(error: BaseException | None, requirements: tuple[str, ...], unmet: str = "") -> tuple[Status, str]:
    """What one phase of a check concluded, before the baseline is applied (``unmet``: what the check asks)."""
    if error is None:
        return Status.PASS, ""
    if isinstance(error, Blocked):
        return Status.BLOCKED, str(error)
    if isinstance(error, NotApplicable):
        return Status.NA, _skip_reason(error)
    if isinstance(error, pytest.skip.Exception):
        return Status.SKIP, _skip_reason(error)
    if isinstance(error, AssertionError):
        return (Status.WARN if is_should_only(requirements) else Status.FAIL), verdict(error, unmet)
    cause = next(iter(leaf_exceptions(error)), error)  # anyio and the SDK wrap causes in groups
    return Status.ERROR, f"{type(cause).__name__} in the harness: {clipped(str(cause), HARNESS_ERROR_LIMIT)}"


def failure_detail(error: BaseException | None) -> str:
    """What a failing check said after its one-line verdict (the offending results it names, one a line).

    The verdict stays the message; this detail is the evidence the reports show beside it. It is bounded:
    at most DETAIL_LINES lines of at most MESSAGE_LIMIT characters and DETAIL_CHARS in all, then a line
    saying how many more there were. pytest's own explanation of a plain ``assert`` is left out."""
    if not isinstance(error, AssertionError) or str(error).startswith(_PYTEST_EXPLANATION):
        return ""  # a bare assert: every line is pytest's
    lines = str(error).split("\n")[1:]
    for index, line in enumerate(lines):
        if line.startswith(_PYTEST_EXPLANATION):
            lines = lines[:index]
            break
    lines = [line for line in lines if not _PYTEST_HINTS.search(line)]
    while lines and not lines[-1].strip():
        lines.pop()
    kept: list[str] = []
    size = 0
    for line in lines:
        shown = clipped(line, MESSAGE_LIMIT)
        if len(kept) == DETAIL_LINES or size + len(shown) > DETAIL_CHARS:
            break
        kept.append(shown)
        size += len(shown) + 1
    if len(kept) < len(lines):
        kept.append(f"… {len(lines) - len(kept)} more")
    return "\n".join(kept)


def apply_baseline(status: Status, message: str, expected: bool) -> tuple[Status, str]:
    """The baseline judges only checks that concluded; BLOCKED, SKIP and ERROR stay what they are."""
    if not expected:
        return status, message
    if status in (Status.FAIL, Status.WARN):
        return Status.XFAIL, message
    if status in (Status.PASS, Status.PIN):  # a PIN is no failure at the run's level
        return Status.XPASS, "the baseline expects this check to fail, but it passed: remove it from the baseline"
    return status, message
