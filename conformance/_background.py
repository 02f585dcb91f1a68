"""Background checks: a check that spends seconds waiting on a clock runs whole on a session of its own.

A few checks are mostly waiting: the server holds a call open until a
confirmation's TTL runs out, or the host answers late on purpose. Their waits are
inside one call or between two calls that must stay close together, so a head
start (``_head_start``) cannot split them. Such a check registers its body with
``@in_background(check_id)``. The run orders the checks on a clock after all the
others (the suite's conftest); when the first of them comes, every selected body
starts at once, each in a thread on a session of its own, so their waits overlap
one another. Their calls never run beside a check that needs the scope to stand
still (a search page and its continuation share one snapshot, which any commit in
the scope moves on), since every such check has ended by then. Each opens its
session when its body starts; on a stdio target the run has opened them ahead
(``_pool``), so that starting the target's processes is not part of the wait.

The check itself takes the outcome: it waits for its body, adds the body's
evidence to its own and raises what the body raised, so it concludes exactly as if
it had run in place. A body not started when its check comes, or whose session
could not be opened, is run by the check itself, on the era's main session: the
background only ever saves time, it never decides an outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engram_mcp.conformance._head_start import has_head_start
from engram_mcp.conformance._profile import Profile
from engram_mcp.conformance._world import Evidence, World

Body = Callable[..., Any]  # body(world, **params): the check's calls and assertions
Applies = Callable[[str, Profile, dict[str, Any]], bool]  # (era, profile, params) -> whether the case can apply
_BODIES: dict[str, Body] = {}  # check id -> its body
_APPLIES: dict[str, Applies] = {}  # check id -> whether a case is worth a session of its own
Params = tuple[tuple[str, Any], ...]  # a case's parameters without its era, sorted by name
SESSION_NOTE = "background_session"  # evidence key: the body ran on a session of its own


def in_background(check_id: str, *, applies: Applies | None = None) -> Callable[[Body], Body]:
    """Register ``body(world, **params)`` as ``check_id``'s whole run, to be started with the checks on a clock.

    ``applies(era, profile, params)``, when given, says beforehand whether a case can do more than find itself
    not applicable; a case for which it is false gets no session of its own and runs in place (it ends at once).
    """

    def register(body: Body) -> Body:
        _BODIES[check_id] = body
        if applies is not None:
            _APPLIES[check_id] = applies
        return body

    return register


def on_a_clock(check_id: str) -> bool:
    """A check that waits for a clock: run in the background, or opened by a head start."""
    return check_id in _BODIES or has_head_start(check_id)


def case_key(params: dict[str, Any]) -> Params:
    return tuple(sorted((name, value) for name, value in params.items() if name != "era"))


@dataclass
class _Job:
    check_id: str
    params: Params
    open_world: Callable[[], Callable[[Evidence], World]]  # opens the job's own session
    # queued -> running -> done, or -> refused (no session: its check runs it in place); queued -> taken (in place)
    state: str = "queued"
    value: Any = None
    error: BaseException | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Background:
    """The background bodies of one run: queued per era as it begins, all started together."""

    _jobs: dict[tuple[str, str, Params], _Job] = field(default_factory=dict)
    _begun_eras: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The tools a check's case calls (its declaration), for the world its body runs in; set by the plugin.
    tools_of: Callable[[str, dict[str, Any]], frozenset[str] | None] = lambda check_id, params: None

    def begin(self, era: str, cases: Iterable[tuple[str, dict[str, Any]]],
              open_world: Callable[[], Callable[[Evidence], World]], profile: Profile | None = None) -> int:
        """Queue the registered bodies among ``cases`` (check id, its parameters) that can apply under ``profile``
        (every one without a profile); each will open its session with ``open_world`` (a World maker for a new
        session) when it starts. Once per era; the number of bodies queued, which is how many sessions they need."""
        with self._lock:
            if era in self._begun_eras:
                return 0
            self._begun_eras.add(era)
            before = len(self._jobs)
            for check_id, params in cases:
                key = (era, check_id, case_key(params))
                applies = _APPLIES.get(check_id)
                if check_id not in _BODIES or key in self._jobs:
                    continue
                if applies is None or profile is None or applies(era, profile, dict(key[2])):
                    self._jobs[key] = _Job(check_id, key[2], open_world)
            return len(self._jobs) - before

    def start(self) -> None:
        """Start every queued body, each in its own thread on its own session."""
        with self._lock:
            queued = [job for job in self._jobs.values() if job.state == "queued"]
            for job in queued:
                job.state = "running"
        for job in queued:
            threading.Thread(target=self._work, args=(job,), daemon=True, name=f"background-{job.check_id}").start()

    def _work(self, job: _Job) -> None:
        try:
            make_world = job.open_world()
        except Exception:  # no session of its own: the check runs the body in place
            job.state = "refused"
            job.done.set()
            return
        evidence = Evidence()
        try:
            world = make_world(evidence)
            world.tools = self.tools_of(job.check_id, dict(job.params))
            job.value = _BODIES[job.check_id](world, **dict(job.params))
        except BaseException as problem:  # pytest's skip too: judged in the check, not here
            job.error = problem
        job.evidence = {SESSION_NOTE: "a session of its own, beside the other checks on a clock", **evidence.items}
        job.state = "done"
        job.done.set()

    def take(self, check_id: str, world: World, **params: Any) -> Any:
        """The body's outcome: waited for when it runs in the background, else run now in ``world``; what it raised
        is raised here and its evidence joins the check's."""
        with self._lock:
            job = self._jobs.get((world.era, check_id, case_key(params)))
            if job is not None and job.state == "queued":
                job.state = "taken"
        if job is not None and job.state != "taken":
            job.done.wait()
        if job is None or job.state in ("taken", "refused"):
            return _BODIES[check_id](world, **params)
        for key, value in job.evidence.items():
            world.evidence.add(key, value)
        if job.error is not None:
            raise job.error
        return job.value
