"""The harness, proved against faulty targets: every variant of tests/faulty/targets.py is caught, the reference is not.

Each variant (tests/faulty, one module a family) is served by ``tests/faulty/targets.py VARIANT --config ...`` and
judged by the real ``conformance`` command line with the variant's ``--select``
and ``--era``, against its own copy of one ``engram-reference init``
configuration (so no two runs share a store). A variant is caught when the run
exits 1, one of its catching checks ends FAIL, each requirement it breaks is
judged FAIL in the report's footer, and nothing ends ERROR. (A variant that
breaks only a SHOULD expects WARN and exit 0 instead: the harness must flag it
without failing the run.) The control runs the plain reference over the union
of every variant's selections, in both eras: it must exit 0 with no FAIL, WARN
or ERROR.

All runs happen once, a few at a time, when the first test of the module asks
for them; each variant then has its own test, and the kill-rate table is
printed in the terminal summary.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._catalog import suite_checks
from engram_mcp.contract import load
from tests.faulty import targets

# The batch of runs happens inside the first test that asks for it; a deeper run, kept out of the default command.
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

WORKERS = 3  # runs in flight at once: each spends part of its time waiting on its servers
RUN_TIMEOUT = 240.0  # seconds one conformance run may take before it is ended, servers and all


NAMES = list(targets.VARIANTS)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One engram-reference init for the module; every run copies it before any store exists."""
    directory = tmp_path_factory.mktemp("faulty") / "init"
    command = [sys.executable, "-m", "engram_mcp.reference._cli", "init", str(directory)]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return directory


@pytest.fixture(scope="module")
def runs(
    template: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    """Every variant and the control, run once, a few at a time; the kill-rate table for the terminal summary."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        # The control is the longest run: it starts first.
        control = pool.submit(targets.run_control, targets.all_selections(), template,
                              tmp_path_factory.mktemp("control"), timeout=RUN_TIMEOUT)
        pending = {name: pool.submit(targets.run_variant, targets.VARIANTS[name], template,
                                     tmp_path_factory.mktemp(name), timeout=RUN_TIMEOUT) for name in NAMES}
        judged: dict[str, Any] = {name: future.result() for name, future in pending.items()}
        judged["control"] = control.result()
    elapsed = time.monotonic() - started
    yield judged
    control = judged["control"]
    lines = [*targets.table(list(targets.VARIANTS.values()), judged),
             f"control (plain reference, {len(targets.all_selections())} selections, both eras): exit "
             f"{control.exit_code}, failing checks {control.failing_checks or 'none'}"
             + (f", {control.problem}" if control.problem else ""),
             f"runs: {len(NAMES) + 1}, {WORKERS} at a time, {elapsed:.0f} s in all"]
    # Printed in pytest's terminal summary, so the table shows in a plain (quiet, captured) run.
    request.config.pluginmanager.register(_KillRateSummary(lines), "faulty-targets-kill-rate")


class _KillRateSummary:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "faulty targets: kill rate")
        for line in self.lines:
            terminalreporter.write_line(line)


def describe(result: Any) -> str:
    interesting = {c: sorted(s) for c, s in result.statuses.items() if s - {"PASS", "SKIP"}}
    return f"non-passing checks: {interesting}\n--- conformance output (tail) ---\n{result.output[-1500:]}"


@pytest.mark.parametrize("name", NAMES)
def test_the_harness_catches_the_variant(runs: dict[str, Any], name: str) -> None:
    item = targets.VARIANTS[name]
    result = runs[name]
    verdict = result.verdict(item)
    gap = f"\nknown harness gap: {item.gap}" if item.gap else ""
    assert verdict == "KILLED", f"{name} ({item.summary}): {verdict}{gap}\n{describe(result)}"


SEQUENCE_ONLY = [name for name, item in targets.VARIANTS.items() if item.sequence_only]


UNEXPLORED_WORKERS = 2  # full runs: two side by side keep both cores busy; more could time out calls (read as a catch)


@pytest.fixture(scope="module")
def unexplored(template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every sequence-only variant under every fixed check, exploration turned off (--explore 0), run once each."""
    with ThreadPoolExecutor(max_workers=UNEXPLORED_WORKERS) as pool:
        pending = {name: pool.submit(targets.run_without_exploration, targets.VARIANTS[name], template,
                                     tmp_path_factory.mktemp(f"unexplored-{name}"), timeout=RUN_TIMEOUT * 2)
                   for name in SEQUENCE_ONLY}
        return {name: future.result() for name, future in pending.items()}


@pytest.mark.parametrize("name", SEQUENCE_ONLY)
def test_a_sequence_defect_slips_past_every_fixed_check(unexplored: dict[str, Any], name: str) -> None:
    """What exploration adds: a defect only a call sequence (or a race) shows passes a full run without it."""
    item, result = targets.VARIANTS[name], unexplored[name]
    assert not result.problem, f"{name}: {result.problem}\n{describe(result)}"
    assert not result.failing_checks and not result.errors, f"{name} ({item.summary}) is caught by fixed checks: " \
        f"{result.failing_checks or result.errors}\n{describe(result)}"
    assert result.exit_code in (0, 5), f"{name}: exit {result.exit_code}\n{describe(result)}"


def test_the_plain_reference_raises_no_false_alarm(runs: dict[str, Any]) -> None:
    control = runs["control"]
    assert not control.problem, f"{control.problem}\n{describe(control)}"
    flagged = {c: sorted(s) for c, s in control.statuses.items() if s & {"FAIL", "WARN", "ERROR", "XPASS"}}
    # The control runs the variants' --select prefixes: a partial run, so incomplete (5) at best.
    assert control.exit_code == 5 and not flagged, f"exit {control.exit_code}, {flagged}\n{describe(control)}"


# -- the catalog itself (no runs) ---------------------------------------------------------------------------


def test_the_catalog_is_wide_and_well_formed() -> None:
    checks = suite_checks()
    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    assert len(NAMES) >= 28
    for item in targets.VARIANTS.values():
        assert item.summary and item.breaks and item.caught_by and item.era in ("legacy", "modern", "both"), item.name
        assert set(item.caught_by) <= set(checks), f"{item.name}: unknown check ids"
        covered = {rid for check_id in item.caught_by for rid in checks[check_id]}
        # The report can only judge a requirement FAIL through a check that names it.
        assert set(item.breaks) <= covered, f"{item.name}: {set(item.breaks) - covered} is named by none of its checks"
        for prefix in item.select:
            assert any(c.startswith(prefix) for c in checks), f"{item.name}: --select {prefix} matches no check"
        assert all(any(c.startswith(p) for p in item.select) for c in item.caught_by), (
            f"{item.name}: a catching check is not selected"
        )
        levels = {catalog[rid]["level"] for rid in item.breaks}
        musts = levels <= {"MUST", "MUST NOT"}
        assert (item.expect == "FAIL") == musts, f"{item.name}: expects {item.expect} for levels {levels}"
