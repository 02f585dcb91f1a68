"""The pytest plugin that turns the suite into a conformance run.

Load it with ``-p engram_mcp.conformance._plugin``; the ``conformance``
command does. It adds the run's options, opens one connection per era after a
preflight, gives checks a World, maps outcomes to statuses and writes the
reports when the session ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._checks import Blocked, NotApplicable, Status, is_should_only, set_deep, take_pins
from engram_mcp.conformance._connect import (
    ERAS,
    Connection,
    EraUnsupported,
    Target,
    TargetUnreachable,
    leaf_exceptions,
    parse_target,
)
from engram_mcp.conformance._host import (
    ConfirmationReferences,
    Confirmer,
    HostBinding,
    ReferenceConfirmation,
    host_from_profile,
    references_from_profile,
)
from engram_mcp.conformance._profile import Profile, ProfileError, load_profile
from engram_mcp.conformance._raw import RawSession
from engram_mcp.conformance._world import Evidence, World

EXIT_CONFORMANT, EXIT_MUST_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_STALE, EXIT_INCOMPLETE = 0, 1, 2, 3, 4, 5
_STATE = pytest.StashKey["Run"]()
FINAL_EXIT: int | None = None  # the judged exit code of the last run in this process


@dataclass
class Result:
    check_id: str
    requirements: tuple[str, ...]
    era: str | None
    status: Status
    nodeid: str
    duration: float
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    not_applicable: bool = False  # a SKIP that says the requirement has nothing to exercise in this run
    pins: dict[str, list[str]] = field(default_factory=dict)  # profile requirement -> failed pin messages


@dataclass
class Run:
    """One conformance run: the target, the host, the connections and what every check concluded."""

    target: Target
    profile: Profile
    host: HostBinding
    confirmer: Confirmer
    eras: tuple[str, ...]
    seed: int
    examples: int
    strict: bool
    baseline: frozenset[str]
    report_dir: Path | None
    timeout: float
    started: float = field(default_factory=time.time)
    level: str = "contract"  # which requirements are scored: contract (+ wiring), or profile (everything)
    deep: bool = False  # run the checks that wait long (confirmation TTL, expiry windows)
    selected: bool = False  # a --select run: a partial report, never a certificate
    connections: dict[str, Connection] = field(default_factory=dict)
    extra: list[Connection] = field(default_factory=list)
    unreachable: str | None = None
    unsupported_eras: dict[str, str] = field(default_factory=dict)  # era -> why the target refused it
    notes: list[str] = field(default_factory=list)  # what the preflight learned that the verdict alone does not say
    profile_refused: bool = False  # the target refuses every binding of the profile: nothing was judged
    results: list[Result] = field(default_factory=list)
    raw_sessions: dict[str, RawSession] = field(default_factory=dict)
    _raw_lock: threading.Lock = field(default_factory=threading.Lock)
    references: ConfirmationReferences | None = None  # the host-reference mode, when the profile declares it

    def connection(self, era: str) -> Connection:
        return self.connections[era]

    def open_extra(self, era: str, *, elicitation: bool) -> Connection:
        """Another session, e.g. one that declares no elicitation capability; closed with the run."""
        conn = Connection(self.target, era, self.confirmer, elicitation=elicitation, timeout=self.timeout)
        conn.open()
        self.extra.append(conn)
        return conn

    def raw(self, era: str) -> RawSession:
        """A raw JSON-RPC session in this era, for what no SDK session can carry (opened once)."""
        with self._raw_lock:
            if era not in self.raw_sessions:
                session = RawSession(self.target, era, self.timeout)
                session.open()
                self.raw_sessions[era] = session
            return self.raw_sessions[era]

    def close(self) -> None:
        for conn in [*self.connections.values(), *self.extra]:
            conn.close()
        for session in self.raw_sessions.values():
            session.close()


# -- options -------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("engram", "Engram memory over MCP conformance")
    group.addoption("--target", help="stdio:CMD or an http(s):// URL of the MCP endpoint under test")
    group.addoption("--profile", help="the target's host profile (TOML, spec/profile.md); without one, only checks "
                                      "that need no host identity run")
    group.addoption("--era", choices=["legacy", "modern", "both"], default="both",
                    help="MCP protocol eras to test: legacy (initialize, up to 2025-11-25), modern (2026-07-28)")
    group.addoption("--select", action="append", default=[], help="run only checks whose id or requirement id starts with this")
    group.addoption("--seed", type=int, default=0, help="seed for generated cases (0: a fixed default)")
    group.addoption("--examples", type=int, default=25, help="generated cases per tool and mode")
    group.addoption("--score-unverified", action="store_true", help="score requirements the contract marks unverified too")
    group.addoption("--expected-failures", help="baseline file: check ids (or check-id@era) expected to fail")
    group.addoption("--report-dir", help="write report.jsonl, certificate.md, report.html and badge.json here")
    group.addoption("--call-timeout", type=float, default=30.0, help="seconds to wait for any one reply")
    group.addoption("--level", choices=["contract", "profile"], default="contract",
                    help="contract: score the contract's requirements and the wiring the harness needs as host; "
                         "profile: score this project's host-profile pins too")
    group.addoption("--deep", action="store_true", help="also run the checks that wait long (a 300 s confirmation "
                                                         "TTL, expiry windows) instead of leaving them not exercised")


def _baseline(path: str | None) -> frozenset[str]:
    if not path:
        return frozenset()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return frozenset(line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engram_check(id, requirements): a conformance check")
    if not config.getoption("--target"):
        return
    try:
        profile = load_profile(Path(config.getoption("--profile"))) if config.getoption("--profile") else Profile.absent()
        host, confirmer = host_from_profile(profile)
        references = references_from_profile(profile)
        target = parse_target(config.getoption("--target"), headers=profile.http_headers)
        baseline = _baseline(config.getoption("--expected-failures"))
    except (ProfileError, ValueError, OSError) as problem:
        raise pytest.UsageError(str(problem)) from None
    era = config.getoption("--era")
    config.stash[_STATE] = Run(
        target=target, profile=profile, host=host, confirmer=confirmer,
        eras=ERAS if era == "both" else (era,), seed=config.getoption("--seed"),
        examples=config.getoption("--examples"), strict=config.getoption("--score-unverified"), baseline=baseline,
        report_dir=Path(config.getoption("--report-dir")) if config.getoption("--report-dir") else None,
        timeout=config.getoption("--call-timeout"),
    )
    run = config.stash[_STATE]
    run.references = references
    run.level, run.deep, run.selected = config.getoption("--level"), config.getoption("--deep"), bool(config.getoption("--select"))
    set_deep(run.deep)


def run_of(config: pytest.Config) -> Run | None:
    return config.stash.get(_STATE, None)


# -- collection ----------------------------------------------------------------


def _check_marker(item: pytest.Item) -> tuple[str, tuple[str, ...]] | None:
    marker = item.get_closest_marker("engram_check")
    return (marker.args[0], marker.args[1]) if marker else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = run_of(metafunc.config)
    if run is not None and "era" in metafunc.fixturenames:
        metafunc.parametrize("era", run.eras, ids=list(run.eras), scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = run_of(config)
    if run is None:
        return
    wanted = config.getoption("--select")
    if wanted:
        keep, drop = [], []
        for item in items:
            marked = _check_marker(item)
            names = [marked[0], *marked[1]] if marked else []
            (keep if any(n.startswith(w) for n in names for w in wanted) else drop).append(item)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Preflight: the target starts and completes the opening exchange in every selected era."""
    run = run_of(session.config)
    if run is None or not session.items:
        return
    for era in run.eras:
        conn = Connection(run.target, era, run.confirmer, timeout=run.timeout)
        try:
            conn.open()
        except EraUnsupported as refusal:
            run.unsupported_eras[era] = str(refusal)
            conn.close()
            continue
        except TargetUnreachable as problem:
            # The message carries the cause and the tail of the target's stderr (_connect.Connection._diagnose).
            conn.close()
            if run.connections:  # another era works, so the target fails this era only: skip it, with why
                run.unsupported_eras[era] = str(problem)
                continue
            first, _, rest = str(problem).partition("\n")
            run.unreachable = f"{first} [{era} era]" + (f"\n{rest}" if rest else "")
            break
        run.connections[era] = conn
    if not run.unreachable and not run.connections:
        run.unreachable = "the target speaks none of the selected protocol eras: " + "; ".join(
            f"{era}: {why}" for era, why in run.unsupported_eras.items())
    if not run.unreachable:
        if run.profile.given:
            run.unreachable = _binding_refused(run)
            run.profile_refused = run.unreachable is not None
        else:
            run.notes.extend(_unbound_discovery(run))
    lost = next((conn for conn in run.connections.values() if conn.lost), None)
    if not run.unreachable and lost is not None:  # it died on the preflight's first requests
        run.unreachable, run.profile_refused = lost.lost_reason(), False
    if run.unreachable:
        # Nothing can be judged: say so once instead of blocking every check in turn.
        session.config.hook.pytest_deselected(items=list(session.items))
        session.items.clear()


BINDING_REFUSED = ("the target refuses this profile's binding — check audience, issuer, key id, trusted key "
                   "(profile keys target.audience, binding.issuer, binding.kid, binding.private_key_file; "
                   "the target must trust the public half of that key under that key id)")
HOW_TO_PROFILE = ("a host profile (--profile FILE) unlocks the checks that need a host identity: signed bindings, "
                  "discovery per principal, and every call of the six tools. `engram-reference init DIR` writes an "
                  "example (DIR/conformance-profile.toml); spec/profile.md documents every key")


def _binding_refused(run: Run) -> str | None:
    """One harmless bound call (tools/list) per era: a target that refuses it with the trusted-context
    error while it answers the unbound one does not accept the profile's binding, and every later
    verdict would blame the target for the profile's mistake."""
    from engram_mcp.contract import load

    scope = run.profile.primary or next(iter(run.profile.scopes), None)
    if scope is None:
        return None
    principal = min(scope.principals, default="conformance-agent")
    untrusted = load().protocol_errors["trusted_context_unavailable"].jsonrpc_code
    refused = []
    for conn in run.connections.values():
        bound = conn.list_tools(run.host.meta(scope, principal))
        unbound = conn.list_tools(None)
        refused.append(bound.kind == "error" and bound.code == untrusted and unbound.kind == "result")
    return BINDING_REFUSED if refused and all(refused) else None


def _unbound_discovery(run: Run) -> list[str]:
    """Without a profile: what the target offers a client that has no host identity, said plainly."""
    from engram_mcp.contract import load

    six = set(load().tools)
    notes = []
    for era, conn in run.connections.items():
        reply = conn.list_tools(None)
        if reply.kind != "result":
            notes.append(f"{era} era: tools/list without a binding was answered {reply.kind} {reply.code!r}")
            continue
        names = sorted(str(t.get("name")) for t in (reply.result or {}).get("tools", []) if isinstance(t, dict))
        offered = [n for n in names if n in six]
        if not names:
            notes.append(f"{era} era: without a host binding the target lists no tool (memory is off by default); "
                         "a profile shows which of the six Engram memory tools it offers")
        elif not offered:
            shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
            notes.append(f"{era} era: this target offers none of the six Engram memory tools "
                         f"(it lists {len(names)} other tool{'s' if len(names) != 1 else ''}: {shown})")
        else:
            notes.append(f"{era} era: without a host binding the target lists {len(offered)} of the six Engram "
                         f"memory tools: {', '.join(offered)}")
    notes.append(HOW_TO_PROFILE)
    return notes


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="session")
def harness(request: pytest.FixtureRequest) -> Iterator[Run]:
    run = run_of(request.config)
    if run is None:
        pytest.skip("no --target: the conformance suite needs a target")
    yield run


@pytest.fixture
def evidence() -> Evidence:
    return Evidence()


@pytest.fixture
def world(harness: Run, era: str, evidence: Evidence) -> World:
    if harness.unreachable:
        raise Blocked(f"target unreachable: {harness.unreachable}")
    if era in harness.unsupported_eras:
        pytest.skip(f"the target does not speak the {era} era: {harness.unsupported_eras[era]}")
    if harness.connection(era).lost:
        reason = harness.connection(era).lost_reason()
        if reason not in harness.notes:
            harness.notes.append(reason)
        raise Blocked(reason.partition("\n")[0])
    if harness.connection(era).stalled:
        raise Blocked(f"the target stopped answering in the {era} era: it did not answer several calls in a row "
                      f"within {harness.timeout:g} s each (--call-timeout)")
    conn = harness.connection(era)
    if harness.references is not None and "server-initiated" not in harness.profile.confirmation_modes:
        conn.confirm_by_reference = ReferenceConfirmation(harness.references, harness.profile)
    return World(conn, harness.host, harness.confirmer, harness.profile, evidence, references=harness.references)


# -- statuses ------------------------------------------------------------------


def _status(call: pytest.CallInfo[None], run: Run, check_id: str, era: str | None,
            requirements: tuple[str, ...]) -> tuple[Status, str]:
    excinfo = call.excinfo
    if excinfo is None:
        status, message = Status.PASS, ""
    elif excinfo.errisinstance(Blocked):
        return Status.BLOCKED, str(excinfo.value)
    elif excinfo.errisinstance(NotApplicable):
        return Status.SKIP, str(excinfo.value.msg if hasattr(excinfo.value, "msg") else excinfo.value)
    elif excinfo.errisinstance(pytest.skip.Exception):
        return Status.SKIP, str(excinfo.value.msg if hasattr(excinfo.value, "msg") else excinfo.value)
    elif excinfo.errisinstance(AssertionError):
        status = Status.WARN if is_should_only(requirements) else Status.FAIL
        message = str(excinfo.value).split("\n")[0][:500]
    else:
        cause = next(iter(leaf_exceptions(excinfo.value)), excinfo.value)  # anyio and the SDK wrap causes in groups
        return Status.ERROR, f"{type(cause).__name__} in the harness: {str(cause)[:300]}"
    expected = check_id in run.baseline or (era and f"{check_id}@{era}" in run.baseline)
    if expected and status in (Status.FAIL, Status.WARN):
        return Status.XFAIL, message
    if expected and status is Status.PASS:
        return Status.XPASS, "the baseline expects this check to fail, but it passed: remove it from the baseline"
    return status, message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    run, marked = run_of(item.config), _check_marker(item)
    if run is None or marked is None:
        return
    # A check concludes in its call phase, or in setup when a fixture stops it (BLOCKED, SKIP, ERROR).
    if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return
    check_id, requirements = marked
    era = item.callspec.params.get("era") if hasattr(item, "callspec") else None
    status, message = _status(call, run, check_id, era, requirements)
    pins = take_pins() if call.when == "call" else {}
    evidence = item.funcargs.get("evidence") if hasattr(item, "funcargs") else None
    run.results.append(Result(check_id, requirements, era, status, item.nodeid, report.duration, message,
                              dict(evidence.items) if isinstance(evidence, Evidence) else {},
                              not_applicable=bool(call.excinfo and call.excinfo.errisinstance(NotApplicable)),
                              pins=pins))
    properties = [("check", check_id), ("status", status.value), ("requirements", " ".join(requirements))]
    if era:
        properties.append(("era", era))
    # JUnit reads them from the item (the teardown report copies them), the log from this report.
    item.user_properties.extend(properties)
    report.user_properties = list(item.user_properties)
    # pytest's own outcome follows the status, so plain pytest and JUnit agree with the verdicts.
    if status in (Status.PASS, Status.WARN):
        report.outcome = "passed"
    elif status in (Status.SKIP, Status.BLOCKED, Status.XFAIL):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), 0, f"{status.value}: {message}")
    else:
        report.outcome = "failed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = run_of(session.config)
    if run is None:
        return
    from engram_mcp.conformance._report import exit_code, write_reports

    run.close()
    if run.report_dir is not None:
        write_reports(run, run.report_dir)
    global FINAL_EXIT
    FINAL_EXIT = session.exitstatus = exit_code(run)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = run_of(config)
    if run is None:
        return
    from engram_mcp.conformance._report import summary_lines

    for line in summary_lines(run):
        terminalreporter.write_line(line)
