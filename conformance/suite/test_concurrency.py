"""Concurrent clients: races between sessions (and replicas) of one store, judged for linearizability.

Each race runs calls from three sessions at once (threads released by one barrier), records every call with its
invocation and return times, and asks whether some order consistent with real time is one the contract model
allows (``_linearize``). The calls go to a history, not to the run's shared sequential state: judged in
arrival order they would blame a correct server for an order it never chose. Every race works on fresh keys,
markers and records, so a fresh model state and the race's own setup calls (in the history too, one after the
other) are all it is judged from.

- the same capture, same key and payload, from three sessions: one effect, the others its replay (EMC-IDEM-005);
- one candidate's admission under one key from three sessions: one outcome, replayed to the others (EMC-IDEM-006);
- a forget racing reads of its record from other sessions, then reads after it returned: once forget returns,
  no get or search serves the record (EMC-FGT-002);
- an acknowledged admission, then reads of the record from other sessions at once: every one sees it
  (EMC-LIFE-002).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from engram_mcp.conformance._checks import Blocked, check, not_applicable, require
from engram_mcp.conformance._connect import Connection, TargetUnreachable
from engram_mcp.conformance._findings import BROKEN_REQUIREMENTS, MODEL_BLAME_ALONE
from engram_mcp.conformance._host import ReferenceConfirmation
from engram_mcp.conformance._linearize import Linearizable, Undecided, Violation
from engram_mcp.conformance._linearize import check as linearize
from engram_mcp.conformance._needs import ADMIT, CAPTURE, FORGET, GET, SEARCH, TOOLS, WITHDRAW
from engram_mcp.conformance._profile import ScopeProfile
from engram_mcp.conformance._run import CONCURRENT_CLIENTS, Run
from engram_mcp.conformance._tracker import HistoryRecorder
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, unique
from engram_mcp.contract import load

ALL_TOOLS = frozenset(TOOLS)
CLIENTS = CONCURRENT_CLIENTS
BARRIER_WAIT = 30.0  # seconds a thread waits for the others to be ready: only a session that hangs takes it


def _sessions(harness: Run, era: str) -> list[Connection]:
    """Three new sessions, round robin over the target and its replicas, opened side by side."""
    targets = [harness.target, *harness.replicas]
    opened: list[Connection | BaseException | None] = [None] * CLIENTS

    def open_one(n: int) -> None:
        target = targets[n % len(targets)]
        try:
            opened[n] = harness.concurrent_session(era, target)
        except (TargetUnreachable, RuntimeError) as problem:
            opened[n] = problem

    threads = [threading.Thread(target=open_one, args=(n,), name=f"concurrent-open-{n}") for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [str(o) for o in opened if not isinstance(o, Connection)]
    require(not failed, f"a concurrent session could not be opened: {failed[0] if failed else ''}")
    sessions = [o for o in opened if isinstance(o, Connection)]
    for n, conn in enumerate(sessions):
        conn.client = f"client{n + 1}" + (f"@{conn.target.label}" if len(targets) > 1 else "")
        if harness.references is not None and "server-initiated" not in harness.profile.confirmation_modes:
            conn.confirm_by_reference = ReferenceConfirmation(harness.references, harness.profile)
    return sessions


def _together(*steps: Callable[[], Any]) -> None:
    """Run the steps in threads released at once; a step's failure is raised here, after all have ended."""
    barrier = threading.Barrier(len(steps))
    failures: list[BaseException] = []

    def run(step: Callable[[], Any]) -> None:
        try:
            barrier.wait(BARRIER_WAIT)
            step()
        except BaseException as problem:  # re-raised in the caller's thread, below
            failures.append(problem)

    threads = [threading.Thread(target=run, args=(step,), name="concurrent-call") for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


class Races:
    """The races of one era: three worlds on sessions of their own, one history recorder shared by them."""

    def __init__(self, world: World, harness: Run, scope: ScopeProfile, principal: str,
                 recorder: HistoryRecorder, sessions: list[Connection]) -> None:
        self.world, self.scope, self.principal, self.recorder = world, scope, principal, recorder
        self.worlds = [World(conn, harness.host, harness.confirmer, harness.profile, world.evidence,
                             references=harness.references) for conn in sessions]
        self.verdicts: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def call(self, n: int, tool: str, arguments: dict[str, Any]) -> Any:
        return self.worlds[n].call(tool, copy.deepcopy(arguments), scope=self.scope, principal=self.principal)

    def get(self, n: int, record: str) -> Any:
        return self.worlds[n].get(record, scope=self.scope, principal=self.principal)

    def search(self, n: int, marker: str) -> Any:
        return self.worlds[n].search(marker, scope=self.scope, principal=self.principal, owned=True, limit=10)

    def admitted(self, marker: str) -> str:
        """Setup on the first session: a capture holding the marker and its admission; the record's id."""
        captured = self.worlds[0].value(self.call(0, CAPTURE, self._capture(marker)), "the race's capture")
        outcome = self.worlds[0].value(self.call(0, ADMIT, {"candidate_id": captured.get("candidate_id"),
                                                            "idempotency_key": fresh_key()}),
                                       "the race's admission").get("outcome", {})
        require(outcome.get("status") == "accepted" and "record_id" in outcome,
                f"admission of benign content was {spoken(outcome.get('status'))}, not accepted")
        return str(outcome["record_id"])

    def _capture(self, marker: str) -> dict[str, Any]:
        return capture_arguments(self.world.profile.purpose_ref, key=fresh_key(),
                                 text=f"Decision {marker}: route every refund through the ledger service.")

    # -- the races ----------------------------------------------------------------------------------------------

    def same_capture(self) -> None:
        arguments = self._capture(unique("race"))
        _together(*(lambda n=n: self.call(n, CAPTURE, arguments) for n in range(CLIENTS)))

    def same_admission(self) -> None:
        captured = self.worlds[0].value(self.call(0, CAPTURE, self._capture(unique("race"))), "the race's capture")
        arguments = {"candidate_id": captured.get("candidate_id"), "idempotency_key": fresh_key()}
        _together(*(lambda n=n: self.call(n, ADMIT, arguments) for n in range(CLIENTS)))

    def forget_racing_reads(self) -> None:
        marker = unique("race")
        record = self.admitted(marker)
        for n in range(1, CLIENTS):  # the other sessions have read it before: nothing they kept may outlive forget
            self.get(n, record)
        forget = {"record_id": record, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"}
        readers = [lambda n=n: (self.get(n, record), self.search(n, marker)) for n in range(1, CLIENTS)]
        _together(lambda: self.call(0, FORGET, forget), *readers)
        _together(*readers)  # after the forget returned

    def reads_after_admission(self) -> None:
        marker = unique("race")
        record = self.admitted(marker)
        _together(*(lambda n=n: (self.get(n, record), self.search(n, marker)) for n in range(CLIENTS)))

    def judge(self, name: str, race: Callable[[], None]) -> Violation | None:
        """Run one race and check its history against a fresh model state; a violation, or None."""
        started = time.monotonic()
        try:
            race()
        finally:
            history = self.recorder.take()
        verdict = linearize(self.recorder.tracker.model, history)
        self.timings[name] = round(time.monotonic() - started, 3)
        if isinstance(verdict, Undecided):
            self.verdicts[name] = f"undecided ({len(history)} calls): {verdict.reason}"
            return None
        if isinstance(verdict, Linearizable):
            self.verdicts[name] = f"linearizable ({len(history)} calls, {verdict.steps} model steps)"
            return None
        self.verdicts[name] = f"not linearizable: {len(verdict.operations)} of {len(history)} calls"
        return verdict


def blamed(violation: Violation) -> list[str]:
    """The requirements the model names at the refused answer, narrowed to those of the refused call's tool (a
    replay situation cites the capture and the mutation replay rules alike)."""
    tool = violation.refused.call.tool if violation.refused is not None else None
    tools = {r["id"]: set(r.get("tools") or ["*"]) for r in load().requirements["requirements"]}
    named = [r for r in violation.broken if tool is None or tools.get(r, {"*"}) & {"*", tool}]
    return named or list(violation.broken)


@pytest.mark.engram_sessions("concurrent")  # its sessions start ahead, beside the checks that come first
@check("explore.concurrent", "EMC-IDEM-005", "EMC-IDEM-006", "EMC-FGT-002", "EMC-LIFE-002",
       uses=(SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET))
def test_concurrent_clients_see_one_linearizable_store(world: World, harness: Run, era: str) -> None:
    """Races between three sessions (over the target and its --replica endpoints): the same capture, the same
    admission under one key, a forget racing reads, reads right after an admission. Every history must be
    linearizable against the contract model: some order consistent with real time is one the contract allows."""
    if harness.explore == 0:  # not exercised: a run without exploration is no full certification
        pytest.skip("exploration turned off (--explore 0)")
    scope = harness.profile.scope_for(ALL_TOOLS)
    if scope is None:
        not_applicable(harness.profile.lacks(harness.profile.scope_words(ALL_TOOLS)))
    if harness.tracker is None:
        not_applicable("the run has no host identity: the contract model cannot describe its calls")
    principal = world.principal(scope, ALL_TOOLS)
    recorder = HistoryRecorder(harness.tracker)
    sessions = _sessions(harness, era)
    for conn in sessions:
        conn.recorder = recorder
    races = Races(world, harness, scope, principal, recorder, sessions)
    world.evidence.add("sessions", [conn.client for conn in sessions])
    try:
        for name, race in (("same-capture", races.same_capture), ("same-admission", races.same_admission),
                           ("forget-racing-reads", races.forget_racing_reads),
                           ("reads-after-admission", races.reads_after_admission)):
            violation = races.judge(name, race)
            if violation is not None:
                world.evidence.add(BROKEN_REQUIREMENTS, blamed(violation))
                world.evidence.add(MODEL_BLAME_ALONE, True)
                world.evidence.add("races", races.verdicts)
                world.evidence.add("history", [op.describe(violation.operations[0].invoked)
                                               for op in violation.operations])
                raise AssertionError(f"{name}: {violation.message}")
    except Blocked:
        world.evidence.add("races", races.verdicts)
        raise
    finally:
        for conn in sessions:
            conn.recorder = None
        harness.give_back(era, sessions)  # the background checks, which come last, draw on them next
        world.evidence.add("seconds", races.timings)
    world.evidence.add("races", races.verdicts)
