"""Head starts: the opening half of a check that waits for a clock, done as the run's first check begins.

Some checks must let time pass between two calls: a retention's ``expires_at``,
a confirmation state's TTL. Waiting inside the check idles the whole run, so
such a check registers its opening calls with ``@head_start(check_id)``; the
plugin begins every selected one, in every era, when the run's first check
runs; their clocks run while the other checks do (the suite orders those
first), and the check itself waits only what is left (usually nothing). The
check still makes every call and every assertion it made before; only the idle
time overlaps.

What an opening raised (BLOCKED, SKIP, an assertion) is raised again in its
check, so the check concludes exactly as if it had opened itself. A check that
finds no head start opens at its own time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engram_mcp.conformance._world import Evidence, World

Opening = Callable[[World], Any]
_OPENINGS: dict[str, Opening] = {}  # check id -> its opening calls


def head_start(check_id: str) -> Callable[[Opening], Opening]:
    """Register ``opening(world)`` as the part of ``check_id`` to run as the run's first check begins."""

    def register(opening: Opening) -> Opening:
        _OPENINGS[check_id] = opening
        return opening

    return register


def has_head_start(check_id: str) -> bool:
    return check_id in _OPENINGS


def seconds_since(started: float) -> float:
    return time.monotonic() - started


def wait_until(moment: float) -> float:
    """Sleep until the monotonic ``moment``; the seconds actually slept (0 when it has passed already)."""
    remaining = moment - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
    return max(0.0, remaining)


@dataclass
class _Opened:
    value: Any = None
    error: BaseException | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class HeadStarts:
    """The openings begun in one run, per era and check id."""

    _opened: dict[tuple[str, str], _Opened] = field(default_factory=dict)
    _begun_eras: set[str] = field(default_factory=set)
    # The tools a check's case calls (its declaration), for the world its opening runs in; set by the plugin.
    tools_of: Callable[[str, dict[str, Any]], frozenset[str] | None] = lambda check_id, params: None

    def begin(self, era: str, check_ids: Iterable[str], make_world: Callable[[Evidence], World]) -> None:
        """Open every registered check among ``check_ids`` in ``era``, once per era."""
        if era in self._begun_eras:
            return
        self._begun_eras.add(era)
        for check_id in sorted(set(check_ids) & _OPENINGS.keys()):
            evidence = Evidence()
            opened = _Opened(evidence=evidence.items)
            try:
                world = make_world(evidence)
                world.tools = self.tools_of(check_id, {})
                opened.value = _OPENINGS[check_id](world)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as problem:  # pytest's skip is a BaseException: judged in the check, not here
                opened.error = problem
            self._opened[(era, check_id)] = opened

    def take(self, check_id: str, world: World) -> Any:
        """The check's opening, begun earlier or now; what it raised is raised here, its evidence joins the check's."""
        opened = self._opened.pop((world.era, check_id), None)
        if opened is None:
            return _OPENINGS[check_id](world)
        for key, value in opened.evidence.items():
            world.evidence.add(key, value)
        if opened.error is not None:
            raise opened.error
        return opened.value
