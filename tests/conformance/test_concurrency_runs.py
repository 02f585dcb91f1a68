"""explore.concurrent end to end: the bundled reference over stdio (three server processes on one SQLite store),
and three ``serve --http`` replicas on one PostgreSQL store, each race's clients spread over them (--replica)."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from engram_mcp.reference._init import store_toml_lines
from tests.postgres_support import postgres_url
from tests.reference.conftest import http_server, init_reference_dir

__all__ = ["postgres_url"]  # the fixture, imported for pytest to find

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
RUN_TIMEOUT = 300


def concurrent_checks(report_dir: Path) -> dict[str, dict]:
    """explore.concurrent's results by era, from the run's report.jsonl."""
    entries = [json.loads(line) for line in (report_dir / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    return {e["era"]: e for e in entries if e["type"] == "check" and e["check"] == "explore.concurrent"}


def test_the_bundled_reference_passes_the_concurrent_races(tmp_path: Path) -> None:
    report = tmp_path / "report"
    run = subprocess.run([*CONFORMANCE, "--target", "reference", "--select", "explore.concurrent", "--report-dir",
                          str(report)], capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=tmp_path)
    assert run.returncode == 5, run.stdout[-3000:] + run.stderr[-2000:]  # a --select run: incomplete at best
    found = concurrent_checks(report)
    assert set(found) == {"legacy", "modern"}, found
    for era, result in found.items():
        assert result["status"] == "PASS", (era, result.get("message"), result.get("detail"))
        races = result["evidence"]["races"]
        assert len(races) == 4 and all(v.startswith("linearizable") for v in races.values()), races


def test_exploration_turned_off_leaves_the_races_not_exercised(tmp_path: Path) -> None:
    report = tmp_path / "report"
    run = subprocess.run([*CONFORMANCE, "--target", "reference", "--select", "explore.concurrent", "--era", "legacy",
                          "--explore", "0", "--report-dir", str(report)], capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, cwd=tmp_path)
    assert run.returncode == 5, run.stdout[-3000:] + run.stderr[-2000:]
    result = concurrent_checks(report)["legacy"]
    assert result["status"] == "SKIP" and "exploration turned off (--explore 0)" in result["message"], result
    # What unlocks them is an option of the run, not the profile.
    assert "exploration turned off (--explore 0) → run with exploration on" in run.stdout, run.stdout[-3000:]


@pytest.mark.slow
def test_three_http_replicas_on_one_postgres_store_race_as_one_server(postgres_url: str, tmp_path: Path) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    with ref.config.open("a", encoding="utf-8") as config:
        config.write("\n" + "\n".join(store_toml_lines(postgres_url)))
    report = tmp_path / "report"
    with ExitStack() as running:
        first, second, third = (running.enter_context(http_server(ref)) for _ in range(3))
        run = subprocess.run(
            [*CONFORMANCE, "--target", first.url, "--replica", second.url, "--replica", third.url, "--profile",
             str(ref.path / "conformance-profile.toml"), "--era", "both", "--select", "explore.concurrent",
             "--report-dir", str(report)],
            capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=tmp_path,
        )
    assert run.returncode == 5, run.stdout[-3000:] + run.stderr[-2000:]
    found = concurrent_checks(report)
    assert set(found) == {"legacy", "modern"}, found
    for era, result in found.items():
        assert result["status"] == "PASS", (era, result.get("message"), result.get("detail"))
        # One client per endpoint: the races ran across the three replicas.
        sessions = result["evidence"]["sessions"]
        assert {s.partition("@")[2] for s in sessions} == {first.url, second.url, third.url}, sessions
    assert not ref.store.exists()  # no replica fell back to a SQLite file
    assert "Traceback" not in (ref.path / "server-http-stderr.log").read_text(encoding="utf-8")
