"""The harness, proved against benign targets: every variant of the catalog in tests/benign is certified.

Each variant differs from the reference only where contract 1.0.0 leaves an
implementer free (texts, schema layout, order, identity, formats, timing). Each
is served by ``tests/benign/targets.py VARIANT --config ...`` and judged by a
full run of the real ``conformance`` command line — every check, both eras, the
default (contract) level — against its own copy of one ``engram-reference
init`` configuration. It is certified when the run exits 0 with a conformant
verdict, no scored requirement is judged FAIL, ERROR or XPASS, and no check
ends ERROR. A variant may break this project's pins (that is what makes
it a variant): the run reports them apart, and the summary lists them. A
variant that is not certified is a harness bug: the check that refused it
judges bytes, not behaviour.

All runs happen once, a few at a time, when the first test asks for them; the
"benign variants certified N/N" line is printed in pytest's terminal summary,
beside the faulty targets' kill rate.
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

from tests.benign import opaque_ids, targets

# The batch of runs happens inside the first test that asks for it; a deeper run, kept out of the default command.
pytestmark = [pytest.mark.timeout(3000), pytest.mark.slow]

WORKERS = 3  # runs in flight at once: each spends part of its time waiting on its server
RUN_TIMEOUT = 600.0  # seconds one full conformance run may take before it is ended, server and all (a loaded machine)


NAMES = list(targets.VARIANTS)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One engram-reference init for the module; every run copies it before any store exists."""
    directory = tmp_path_factory.mktemp("benign") / "init"
    command = [sys.executable, "-m", "engram_mcp.reference._cli", "init", str(directory)]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return directory


@pytest.fixture(scope="module")
def runs(
    template: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    """Every variant run once, a few at a time; the certification count for the terminal summary."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        pending = {name: pool.submit(targets.run_variant, targets.VARIANTS[name], template,
                                     tmp_path_factory.mktemp(name), timeout=RUN_TIMEOUT) for name in NAMES}
        judged = {name: future.result() for name, future in pending.items()}
    elapsed = time.monotonic() - started
    yield judged
    verdicts = {name: targets.certified(result) for name, result in judged.items()}
    width = max(len(name) for name in NAMES)
    lines = [
        f"{name.ljust(width)} | {judged[name].seconds:5.0f} s | "
        + ("certified" if ok else f"NOT CERTIFIED: {why}")
        + (
            f" | pins not kept: {', '.join(pins)}"
            if (pins := targets.profile_differences(judged[name]))
            else ""
        )
        for name, (ok, why) in verdicts.items()
    ]
    passed = sum(1 for ok, _ in verdicts.values() if ok)
    lines += [f"benign variants certified {passed}/{len(NAMES)}",
              f"runs: {len(NAMES)} full runs (every check, both eras), {WORKERS} at a time, {elapsed:.0f} s in all"]
    request.config.pluginmanager.register(_CertifiedSummary(lines), "benign-variants-certified")


class _CertifiedSummary:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "benign variants: certified")
        for line in self.lines:
            terminalreporter.write_line(line)


def describe(result: Any) -> str:
    interesting = {c: sorted(s) for c, s in result.statuses.items() if s - {"PASS", "SKIP"}}
    return f"non-passing checks: {interesting}\n--- conformance output (tail) ---\n{result.output[-2000:]}"


@pytest.mark.parametrize("name", NAMES)
def test_the_harness_certifies_the_variant(runs: dict[str, Any], name: str) -> None:
    item = targets.VARIANTS[name]
    ok, why = targets.certified(runs[name])
    assert ok, f"{name} ({item.summary}; free because {item.freedom}): {why}\n{describe(runs[name])}"


def test_the_catalog_is_wide_and_well_formed() -> None:
    assert len(NAMES) >= 10
    for item in targets.VARIANTS.values():
        assert item.summary and item.freedom, item.name


def test_the_id_mappings_round_trip() -> None:
    """The opaque-id variants hand out other ids of the same length and map them back to the reference's."""
    inner = "mem_y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq"
    outer = opaque_ids.outer_record(inner)
    assert outer != inner and len(outer) == len(inner) and opaque_ids.RECORD.match(outer)
    assert opaque_ids.inner_record(outer) == inner
    cursor = "v1.Opaque-cursor_Value"
    assert opaque_ids.outer_cursor(cursor) != cursor and len(opaque_ids.outer_cursor(cursor)) == len(cursor)
    assert opaque_ids.inner_cursor(opaque_ids.outer_cursor(cursor)) == cursor
