"""The pytest plugin that turns the suite into a conformance run: its hooks and fixtures.

The public module ``engram_mcp.conformance.plugin`` (the ``pytest11`` entry
point) adds the options and loads this module once a run names ``--target``;
``conformance`` calls ``run_suite``. The hooks build the Run
(``_run``), run the preflight (``_preflight``), give checks a World, turn each
outcome into a status (``_status``) and judge and report the run when the
session ends. The judged exit code is ``Run.exit_code``, returned by
``run_suite`` as a value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._background import on_a_clock
from engram_mcp.conformance._checks import (
    SOURCES_SCORED,
    Blocked,
    Status,
    not_applicable,
    set_deep,
    take_pins,
)
from engram_mcp.conformance._cli_run import reference_target
from engram_mcp.conformance._connect import ERAS, Connection, parse_target
from engram_mcp.conformance._console import Console
from engram_mcp.conformance._defaults import EXIT_UNREACHABLE, EXIT_USAGE, check_ids
from engram_mcp.conformance._findings import leveled
from engram_mcp.conformance._host import ReferenceConfirmation, references_from_profile
from engram_mcp.conformance._ids import requirement_ids, unknown_baseline_errors, unknown_prefix_errors
from engram_mcp.conformance._needs import Needs, tool_name
from engram_mcp.conformance._preflight import preflight
from engram_mcp.conformance._profile import Profile, ProfileError, load_profile
from engram_mcp.conformance._readiness import case_tools, unmet
from engram_mcp.conformance._report import write_reports
from engram_mcp.conformance._run import Result, Run, utc_now  # Result, Run: re-exported for older imports
from engram_mcp.conformance._status import (
    apply_baseline,
    expected_to_fail,
    failure_detail,
    outcome_status,
    read_baseline,
)
from engram_mcp.conformance._tracker import RecordingHost, Tracker
from engram_mcp.conformance._verdicts import exit_code, summary_lines
from engram_mcp.conformance._world import Evidence, World, answers_since
from engram_mcp.conformance.hosts import host_from_profile
from engram_mcp.conformance.plugin import EXPLORE_DEEP, EXPLORE_DEFAULT, REPLAY_CHECK
from engram_mcp.contract import load

__all__ = ["Outcome", "Result", "Run", "run_of", "run_suite"]

SUITE = Path(__file__).resolve().parent / "suite"
PUBLIC_NAME = "engram_mcp.conformance.plugin"  # also the pytest11 entry point's name, so -p finds it loaded
_STATE = pytest.StashKey[Run]()
# The options live in the light public module; loaded by its own name (-p ..._plugin), this module brings them.
pytest_plugins = [PUBLIC_NAME]


# -- running the suite -------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a run of the suite concluded: the judged exit code, and the run (None when pytest stopped first)."""

    exit_code: int
    run: Run | None


class _Keep:
    """Keeps the run of the session that pytest.main runs, so it can be returned."""

    def __init__(self) -> None:
        self.run: Run | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.run = run_of(session.config)


def run_suite(options: Sequence[str], *, verbose: bool = False, quiet: bool = False,
              modules: Sequence[str] | None = None) -> Outcome:
    """Run the conformance suite in this process and return its verdict.

    ``options`` are the run's own (``--target``, ``--profile``, ``--era``,
    ``--select``, ``--report-dir``, ...); the pytest plumbing is added here.
    The console speaks in checks (``_console``): one line per family, or a
    live progress display on a terminal; ``verbose`` lists every check,
    ``quiet`` prints nothing (for callers that print their own summary); ``modules`` names the suite modules to
    collect, for a partial run that needs only those (``_defaults.modules_for``).
    """
    keep = _Keep()
    console = Console(verbose=verbose, quiet=quiet, run_of=run_of)
    paths = [str(SUITE / module) for module in modules] if modules else [str(SUITE)]
    arguments = [
        *paths, "-p", PUBLIC_NAME, "-c", os.devnull, "--rootdir", str(SUITE), "--import-mode=importlib",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--no-header", "--tb=no",
        "-W", "ignore::pytest.PytestAssertRewriteWarning", *options,
    ]
    try:
        with _no_plugin_autoload():
            code = pytest.main(arguments, plugins=[keep, console])
    finally:
        console.close()
    if keep.run is not None and keep.run.exit_code is not None:
        return Outcome(keep.run.exit_code, keep.run)
    # pytest stopped before the run was judged: its usage error, or an internal one.
    return Outcome(EXIT_USAGE if code == pytest.ExitCode.USAGE_ERROR else EXIT_UNREACHABLE, keep.run)


@contextlib.contextmanager
def _no_plugin_autoload() -> Iterator[None]:
    """The suite needs only this plugin (named with -p): loading every installed pytest11 plugin (schemathesis',
    hypothesis', anyio's, ...) cost each run ~2.5 s before its first call, and a stray plugin could change it."""
    before = os.environ.get(AUTOLOAD_SWITCH)
    os.environ[AUTOLOAD_SWITCH] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(AUTOLOAD_SWITCH, None)
        else:
            os.environ[AUTOLOAD_SWITCH] = before


AUTOLOAD_SWITCH = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


# -- the run -------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--target"):
        return
    target_text, given = config.getoption("--target"), config.getoption("--profile")
    if target_text == "reference":  # the bundled reference, on a configuration of its own, as the CLI runs it
        scratch = Path(tempfile.mkdtemp(prefix="engram-conformance-"))
        config.add_cleanup(lambda: shutil.rmtree(scratch, ignore_errors=True))
        target_text, generated = reference_target(scratch / "reference")
        given = given or str(generated)
    try:
        profile = load_profile(Path(given)) if given else Profile.absent()
        host, confirmer = host_from_profile(profile)
        tracker = Tracker(profile) if profile.given else None
        if tracker is not None:  # every binding the host mints, the contract model learns
            host = RecordingHost(host, tracker, profile.purpose_ref)
        references = references_from_profile(profile)
        target = parse_target(target_text, headers=profile.http_headers)
        baseline = read_baseline(config.getoption("--expected-failures"))
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
    run.tracker = tracker
    run.level, run.deep = config.getoption("--level"), config.getoption("--deep")
    explore = config.getoption("--explore")
    if explore is not None and explore < 0:
        raise pytest.UsageError("--explore takes a number of calls, 0 or more")
    run.explore = explore if explore is not None else (EXPLORE_DEEP if run.deep else EXPLORE_DEFAULT)
    trace, replay = config.getoption("--explore-trace"), config.getoption("--replay")
    run.explore_trace = Path(trace) if trace else None
    run.replay = Path(replay) if replay else None
    run.explore_shrink = max(0, config.getoption("--explore-shrink"))
    try:
        run.replicas = tuple(parse_target(url, headers=profile.http_headers) for url in config.getoption("--replica"))
    except ValueError as problem:
        raise pytest.UsageError(str(problem)) from None
    run.select = tuple(config.getoption("--select"))
    tools = [tool_name(tool) for tool in config.getoption("--tool")]
    if None in tools:
        raise pytest.UsageError(f"--tool names one of the six tools: {', '.join(load().tools)}")
    run.tools = tuple(t for t in tools if t is not None)
    run.fail_fast = config.getoption("--fail-fast")
    run.selected = bool(run.select or run.tools)
    set_deep(run.deep)


def run_of(config: pytest.Config) -> Run | None:
    return config.stash.get(_STATE, None)


# -- collection ----------------------------------------------------------------


def _check_marker(item: pytest.Item) -> tuple[str, tuple[str, ...]] | None:
    marker = item.get_closest_marker("engram_check")
    return (marker.args[0], marker.args[1]) if marker else None


def _needs_of(item: pytest.Item) -> Needs | None:
    marker = item.get_closest_marker("engram_check")
    return marker.args[2] if marker is not None and len(marker.args) > 2 else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = run_of(metafunc.config)
    if run is not None and "era" in metafunc.fixturenames:
        metafunc.parametrize("era", run.eras, ids=list(run.eras), scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = run_of(config)
    if run is None:
        return
    _refuse_unknown_ids(run, config.getoption("--select"), {m[0] for m in map(_check_marker, items) if m} | check_ids())
    if run.replay is None:  # the replay of a counterexample runs only when one is given: no part of a certification
        items[:] = [item for item in items if (_check_marker(item) or ("",))[0] != REPLAY_CHECK]
    if run.tools:
        _keep_the_tools(config, items, frozenset(run.tools))
    wanted = config.getoption("--select")
    if wanted:
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            marked = _check_marker(item)
            names = [marked[0], *marked[1]] if marked else []
            (keep if any(n.startswith(w) for n in names for w in wanted) else drop).append(item)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _keep_the_tools(config: pytest.Config, items: list[pytest.Item], tools: frozenset[str]) -> None:
    """--tool: the cases that call one of ``tools``, and the checks that judge whichever tools are served."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        needs = _needs_of(item)
        callspec = getattr(item, "callspec", None)
        calls = needs is not None and (needs.judges_served or bool(needs.tools(callspec.params if callspec else {})
                                                                    & tools))
        (keep if calls else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _refuse_unknown_ids(run: Run, wanted: Sequence[str], checks: set[str]) -> None:
    """A typed id that names nothing is a usage error before the target is reached, not a silent partial run."""
    problems = [*unknown_prefix_errors(wanted, checks | requirement_ids()),
                *unknown_baseline_errors(run.baseline, checks, ERAS)]
    if problems:
        raise pytest.UsageError("\n".join(problems))


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """A check dropped by pytest's own filters (-k, -m, --deselect) makes the run partial, as --select does.

    The plugin's own deselection of an unreachable target's checks is not a selection: the
    run is judged unreachable instead.
    """
    run = run_of(items[0].config) if items else None
    if run is not None and not run.unreachable and any(_check_marker(item) for item in items):
        run.selected = True


def pytest_collection_finish(session: pytest.Session) -> None:
    run = run_of(session.config)
    if run is None or not session.items:
        return
    preflight(run)
    if run.unreachable:
        # Nothing can be judged: say so once instead of blocking every check in turn.
        session.config.hook.pytest_deselected(items=list(session.items))
        session.items.clear()
        return
    # The extra sessions the selected checks use start now, beside the checks that come first.
    run.warm({kind for item in session.items for mark in item.iter_markers("engram_sessions") for kind in mark.args})


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="session")
def harness(request: pytest.FixtureRequest) -> Run:
    run = run_of(request.config)
    if run is None:
        pytest.skip("no --target: the conformance suite needs a target")
    return run


@pytest.fixture
def evidence() -> Evidence:
    return Evidence()


@pytest.fixture
def world(request: pytest.FixtureRequest, harness: Run, era: str, evidence: Evidence) -> World:
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
    # The run's first check opens, in every era, the head starts, so their waits overlap the rest, and queues the
    # background checks.
    for each in harness.connections:
        if not (harness.connection(each).lost or harness.connection(each).stalled):
            _begin_clocks(harness, each, request.session.items)
    marked = _check_marker(request.node)
    request.node.stash[CALLS_FROM] = (harness.connection(era), len(harness.connection(era).calls))
    tools = _ready(harness, request.node, era)
    if marked is not None and on_a_clock(marked[0]):
        harness.background.start()  # the first check on a clock: every other check has ended (the suite's order)
    return _world_maker(harness, harness.connection(era))(evidence, tools)


def _ready(harness: Run, item: pytest.Item, era: str) -> frozenset[str] | None:
    """The tools the check's case calls, once its needs are met; SKIP (not exercised) or not applicable, saying
    what is missing, before it makes any call. The tools are kept on the item for its result."""
    needs = _needs_of(item)
    if needs is None:
        return None
    if era not in needs.eras:
        not_applicable(f"the check applies to the {' and '.join(ERA_WORDS[e] for e in needs.eras)} only")
    callspec = getattr(item, "callspec", None)
    tools = case_tools(harness, needs, callspec.params if callspec is not None else {})
    item.stash[CASE_TOOLS] = tools
    if not harness.profile.given or needs.unbound:
        return tools
    missing, reason = unmet(harness, tools)
    if needs.judges_served and not tools:
        missing, reason = tuple(load().tools), "judges the tools the target serves, and it serves none of the six"
    if reason is not None:
        item.stash[MISSING_TOOLS] = missing
        pytest.skip(reason)
    home = harness.profile.scope_for(tools)
    for role in needs.roles:
        if harness.profile.role(role, home) is None:
            pytest.skip(harness.profile.lacks(role))
    return tools


ERA_WORDS = {"legacy": "legacy era (initialize)", "modern": "2026-07-28 era"}
CALLS_FROM = pytest.StashKey[tuple[Connection, int]]()  # the check's session, and how many calls it had made before
CASE_TOOLS = pytest.StashKey[frozenset[str]]()  # the tools the check's case calls
MISSING_TOOLS = pytest.StashKey[tuple[str, ...]]()  # those the run could not give it


def _world_maker(harness: Run, conn: Connection) -> Callable[..., World]:
    """Worlds on ``conn`` (one per check, each with its evidence and the tools its case calls); set to confirm by
    reference where it must."""
    if harness.references is not None and "server-initiated" not in harness.profile.confirmation_modes:
        conn.confirm_by_reference = ReferenceConfirmation(harness.references, harness.profile)
    return lambda seen, tools=None: World(conn, harness.host, harness.confirmer, harness.profile, seen,
                                          references=harness.references, tools=tools, served=harness.served)


def _begin_clocks(harness: Run, era: str, items: Sequence[pytest.Item]) -> None:
    """Begin the era's head starts on its session and queue its background checks (once)."""
    if era in harness.clocks_begun:
        return
    harness.clocks_begun.add(era)
    needs = {marked[0]: found for item in items if (marked := _check_marker(item)) and (found := _needs_of(item))}

    def tools_of(check_id: str, params: dict[str, Any]) -> frozenset[str] | None:
        declared = needs.get(check_id)
        return case_tools(harness, declared, params) if declared is not None else None

    harness.head_starts.tools_of = harness.background.tools_of = tools_of
    cases = _cases_in_era(items, era)
    harness.head_starts.begin(era, {check_id for check_id, _ in cases}, _world_maker(harness, harness.connection(era)))
    queued = harness.background.begin(era, cases, lambda: _world_maker(harness, harness.background_session(era)),
                                      harness.profile)
    harness.reserve_sessions(era, queued)  # they start now, beside the checks that come first


def _cases_in_era(items: Sequence[pytest.Item], era: str) -> list[tuple[str, dict[str, Any]]]:
    """The era's checks in run order: (check id, the case's parameters)."""
    found = []
    for item in items:
        marked = _check_marker(item)
        callspec = getattr(item, "callspec", None)
        if marked is not None and callspec is not None and callspec.params.get("era") == era:
            found.append((marked[0], dict(callspec.params)))
    return found


# -- statuses ------------------------------------------------------------------


def _status(call: pytest.CallInfo[None], run: Run, check_id: str, era: str | None,
            requirements: tuple[str, ...], case: str | None = None) -> tuple[Status, str]:
    """What one phase of a check concluded (without its pins and evidence), at the run's level, baseline applied."""
    status, message = outcome_status(call.excinfo.value if call.excinfo else None, requirements)
    result = _leveled(Result(check_id, requirements, era, status, "", 0.0, message, case=case), run)
    return result.status, result.message


def _leveled(result: Result, run: Run) -> Result:
    """The result as the run's level shows it (PIN where only unscored pins failed), then the baseline applied."""
    shown = leveled(result, SOURCES_SCORED[getattr(run, "level", "contract")])
    message = result.message
    if shown is not result.status and result.status is Status.PASS:  # the pins' own messages say what failed
        message = "; ".join(m for messages in result.pins.values() for m in messages)
    if shown in (Status.PASS, Status.FAIL, Status.WARN, Status.PIN):
        shown, message = apply_baseline(shown, message, expected_to_fail(run.baseline, result.check_id, result.era,
                                                                          result.case))
    if shown is result.status:
        return result
    return dataclasses.replace(result, status=shown, message=message, raw=result.status)


def case_id(item: pytest.Item, era: str | None) -> str | None:
    """The item's parametrised case without its era: pytest's own ids, so it is stable and readable."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    # One id per parametrize call, in pytest's order (the era's is one of them); the joined id where that is gone.
    parts = list(getattr(callspec, "_idlist", None) or callspec.id.split("-"))
    if era is not None and era in parts:
        parts.remove(era)
    return "-".join(parts) or None


def _asks(item: pytest.Item) -> str:
    """What the check asks of the target, from its docstring's first line: the verdict of a message-less assert."""
    function = getattr(item, "function", None)
    return (inspect.getdoc(function) or "").split("\n")[0] if function is not None else ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _conclude(item, call, report)
    return report


def _conclude(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """Record what a check concluded as a Result, and make pytest's own outcome agree with it."""
    run, marked = run_of(item.config), _check_marker(item)
    if run is None or marked is None:
        return
    # A check concludes in its call phase, or in setup when a fixture stops it (BLOCKED, SKIP, ERROR).
    if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return
    check_id, requirements = marked
    era = item.callspec.params.get("era") if hasattr(item, "callspec") else None
    case = case_id(item, era)
    status, message = outcome_status(call.excinfo.value if call.excinfo else None, requirements, _asks(item))
    pins = take_pins() if call.when == "call" else {}
    evidence = item.funcargs.get("evidence") if hasattr(item, "funcargs") else None
    result = _leveled(Result(check_id, requirements, era, status, item.nodeid, report.duration, message,
                             dict(evidence.items) if isinstance(evidence, Evidence) else {},
                             pins=pins, case=case,
                             detail=failure_detail(call.excinfo.value if call.excinfo else None),
                             tools=tuple(t for t in load().tools if t in (item.stash.get(CASE_TOOLS, None) or ())),
                             missing=item.stash.get(MISSING_TOOLS, ())), run)
    if result.underlying in (Status.FAIL, Status.ERROR, Status.WARN) or result.status is Status.PIN:
        conn, start = item.stash.get(CALLS_FROM, (None, 0))
        answers = answers_since(conn, start) if conn is not None else []
        if answers:
            result.evidence["answers"] = answers
    run.results.append(result)
    status = result.status
    if run.fail_fast and status in (Status.FAIL, Status.ERROR):
        item.session.shouldstop = f"--fail-fast: {result.label} failed"
    properties = [("check", check_id), ("status", status.value), ("requirements", " ".join(requirements))]
    if era:
        properties.append(("era", era))
    if case:
        properties.append(("case", case))
    # JUnit reads them from the item (the teardown report copies them), the log from this report.
    item.user_properties.extend(properties)
    report.user_properties = list(item.user_properties)
    # pytest's own outcome follows the status, so plain pytest and JUnit agree with the verdicts.
    if status in (Status.PASS, Status.WARN, Status.PIN):
        report.outcome = "passed"
    elif status in (Status.SKIP, Status.NA, Status.BLOCKED, Status.XFAIL):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), 0, f"{status.value}: {message}")
    else:
        report.outcome = "failed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = run_of(session.config)
    if run is None:
        return
    run.close()
    if exitstatus == pytest.ExitCode.USAGE_ERROR:  # refused before any check ran: there is nothing to judge
        return
    run.finished_at = utc_now()
    run.exit_code = exit_code(run)
    if run.report_dir is not None:
        write_reports(run, run.report_dir)
    session.exitstatus = run.exit_code


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = run_of(config)
    if run is None or run.exit_code is None:
        return
    for line in summary_lines(run):
        terminalreporter.write_line(line)
