"""What ``conformance`` prints while it runs: checks, not pytest.

pytest's own terminal output (dots, node ids, its count line) goes to
nowhere; this console speaks in check families instead:

- on a terminal (and not in CI): a live progress bar per family with its
  status counts (rich);
- otherwise (a pipe, a file, or ``CI`` set): one plain line per family and
  era once its last check in that era has run (the suite runs one era after
  the other, so a CI log shows progress), readable and stable;
- ``verbose``: one line per check, ``STATUS check@era[case]`` and, unless it
  passed, its one-line verdict;

and then the failing checks and the run's summary (``_report.summary_lines``).
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import pytest

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._run import Result, Run
from engram_mcp.conformance._verdicts import summary_lines

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

FAILING = (Status.FAIL, Status.ERROR, Status.XPASS)
SHOWN_FAILURES = 40  # the reports list every one; the console shows the first ones
MESSAGE_WIDTH = 160
FAMILY_WIDTH = 12  # the family column at least; as wide as the run's longest family name (confirmation-ref)
_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.ERROR: "bold red", Status.XPASS: "red",
          Status.WARN: "yellow", Status.BLOCKED: "yellow", Status.SKIP: "dim", Status.NA: "dim", Status.XFAIL: "dim",
          Status.PIN: "magenta"}


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """CI services set CI (GitHub, GitLab, and most others) to a true value."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def _real_stdout() -> IO[str]:
    """A handle on the process's stdout that pytest's capture cannot redirect (it swaps fd 1 during checks)."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace", buffering=1)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no file descriptor: write as told
        return sys.stdout


def counts_text(counts: Counter[Status]) -> str:
    return ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s])


def check_line(result: Result) -> str:
    line = f"{result.status.value:<8}{result.label}"
    if result.status is not Status.PASS and result.message:
        message = result.message.splitlines()[0]
        line += " — " + (message if len(message) <= MESSAGE_WIDTH else message[:MESSAGE_WIDTH - 1] + "…")
    return line


@dataclass
class Family:
    """The checks of one family (the check id up to its first dot), in one era or over the run."""

    name: str
    era: str | None = None
    total: int = 0
    done: int = 0
    counts: Counter[Status] = field(default_factory=Counter)
    elapsed: float = 0.0  # the time its checks took, not the span they were spread over
    reported: bool = False
    width: int = FAMILY_WIDTH  # of the name's column, the same for every family of the run

    def line(self) -> str:
        tally = counts_text(self.counts) or "nothing ran"
        return (f"{self.name:<{self.width}} {self.era or '':<7} {self.done:>4}/{self.total:<4} {tally}  "
                f"({self.elapsed:.1f} s)")


class Console:
    """A pytest plugin object: give it to pytest.main(plugins=[...]) to have the run speak in checks."""

    def __init__(self, *, verbose: bool = False, quiet: bool = False, stream: IO[str] | None = None,
                 live: bool | None = None, run_of: Callable[[pytest.Config], Run | None] | None = None) -> None:
        self.verbose, self.quiet = verbose, quiet
        self._run_of = run_of  # where the session keeps its run (the plugin's stash), given by whoever runs it
        self._owned = stream is None
        self.stream = _real_stdout() if stream is None else stream
        self.live = (self.stream.isatty() and not in_ci()) if live is None else live
        self.families: dict[str, Family] = {}  # over the run: the live display's bars
        self.parts: dict[tuple[str, str | None], Family] = {}  # per era: the plain lines
        self._part_of: dict[str, tuple[str, str | None]] = {}  # node id -> (family, era)
        self._began: dict[str, float] = {}  # node id -> when it started
        self._seen = 0  # results already shown
        self._run: Run | None = None
        self._progress: Progress | None = None  # while the live display runs
        self._tasks: dict[str, TaskID] = {}
        self._muted: IO[str] | None = None
        self.width = FAMILY_WIDTH  # the family column: set from the collected families' names

    # -- output ------------------------------------------------------------------

    def say(self, text: str = "", style: str | None = None) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Stop the display and let go of the streams; safe to call more than once."""
        self._stop_live()
        if self._muted is not None:
            self._muted.close()
            self._muted = None
        if self._owned and self.stream is not sys.stdout:
            self.stream.close()

    # -- hooks -------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """pytest keeps a terminal reporter (other plugins write through it), but it writes to nowhere."""
        standard = config.pluginmanager.get_plugin("terminalreporter")
        if standard is None:
            return
        config.pluginmanager.unregister(standard)
        self._muted = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed with the console
        config.pluginmanager.register(pytest.TerminalReporter(config, self._muted), "terminalreporter")

    def _session_run(self, session: pytest.Session) -> Run | None:
        return self._run_of(session.config) if self._run_of is not None else None

    def pytest_unconfigure(self) -> None:
        self.close()

    def pytest_internalerror(self, excrepr: Any) -> None:
        # The muted reporter would swallow it: a defect of the harness itself, shown whole.
        self._stop_live()
        print(f"conformance: internal error in the harness\n{excrepr}", file=sys.stderr)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a broken suite module: the harness's own defect, never hidden
            print(f"conformance: the suite could not be collected ({report.nodeid or 'suite'}):\n"
                  f"{report.longreprtext}", file=sys.stderr)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._run = self._session_run(session)
        for item in session.items:
            marker = item.get_closest_marker("engram_check")
            name = str(marker.args[0]).split(".", 1)[0] if marker else "other"
            callspec = getattr(item, "callspec", None)
            era = callspec.params.get("era") if callspec is not None else None
            self.families.setdefault(name, Family(name)).total += 1
            self.parts.setdefault((name, era), Family(name, era)).total += 1
            self._part_of[item.nodeid] = (name, era)
        self.width = max([FAMILY_WIDTH, *(len(name) for name in self.families)])
        for tally in [*self.families.values(), *self.parts.values()]:
            tally.width = self.width
        if self.families and not self.quiet:
            families = f"{len(self.families)} famil{'ies' if len(self.families) != 1 else 'y'}"
            eras = f"; eras: {', '.join(self._run.eras)}" if self._run else ""
            self.say(f"{len(session.items)} checks in {families}{eras}")
            if self.live:
                self._start_live()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._began[nodeid] = time.monotonic()
        key = self._part_of.get(nodeid)
        if key is not None and self._progress is not None:
            self._progress.start_task(self._tasks[key[0]])  # a no-op once started

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        key = self._part_of.get(nodeid)
        if key is None:
            return
        took = time.monotonic() - self._began.pop(nodeid, time.monotonic())
        part, family = self.parts[key], self.families[key[0]]
        for tally in (part, family):
            tally.done += 1
            tally.elapsed += took
        for result in self._new_results():
            self.parts.get((result.family, result.era), part).counts[result.status] += 1
            self.families.get(result.family, family).counts[result.status] += 1
            if self.verbose:
                self.say(check_line(result), _STYLE.get(result.status))
        self._show(part, family)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        run = self._run or self._session_run(session)
        self._stop_live()
        for part in self.parts.values():  # families cut short (an interrupted run) still get their line
            if not part.reported and not self.live and part.done:
                self.say(part.line())
        if run is None or run.exit_code is None:  # refused (a usage error) or never judged: no summary to show
            return
        failing = [r for r in run.results if r.status in FAILING]
        if failing and not self.verbose:
            self.say("")
            self.say(f"failing checks ({len(failing)}):")
            for result in failing[:SHOWN_FAILURES]:
                self.say("  " + check_line(result), _STYLE.get(result.status))
            if len(failing) > SHOWN_FAILURES:
                self.say(f"  … and {len(failing) - SHOWN_FAILURES} more (report.jsonl lists every one)")
        pinned = [r for r in run.results if r.status is Status.PIN]
        if pinned and not self.verbose:
            self.say("")
            self.say(f"pins not kept ({len(pinned)}; not scored at the {run.level} level):")
            for result in pinned[:SHOWN_FAILURES]:
                self.say("  " + check_line(result), _STYLE[Status.PIN])
            if len(pinned) > SHOWN_FAILURES:
                self.say(f"  … and {len(pinned) - SHOWN_FAILURES} more (report.jsonl lists every one)")
        for line in summary_lines(run):
            self.say(line)

    # -- internals ---------------------------------------------------------------

    def _new_results(self) -> list[Result]:
        if self._run is None:
            return []
        fresh = self._run.results[self._seen:]
        self._seen = len(self._run.results)
        return fresh

    def _show(self, part: Family, family: Family) -> None:
        if self._progress is not None:
            self._progress.update(self._tasks[family.name], completed=family.done,
                                  counts=counts_text(family.counts))
        elif part.done == part.total and not part.reported:
            part.reported = True
            self.say(part.line())

    def _start_live(self) -> None:
        if self.quiet:
            return
        from rich.console import Console as RichConsole
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn(f"{{task.description:<{self.width}}}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[counts]}"), console=RichConsole(file=self.stream), transient=False,
        )
        for family in self.families.values():
            self._tasks[family.name] = self._progress.add_task(family.name, total=family.total, counts="", start=False)
        self._progress.start()

    def _stop_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
