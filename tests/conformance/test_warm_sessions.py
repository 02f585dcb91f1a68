"""The extra sessions a run's checks declare are opened in the background before the checks ask for them."""

from __future__ import annotations

import shlex
import sys
import threading
import time
from pathlib import Path

from engram_mcp.conformance._connect import Connection, parse_target
from engram_mcp.conformance._run import CONCURRENT_CLIENTS, Run
from engram_mcp.reference.init import write_configuration


def test_the_watched_transcript_is_taken_in_the_background_and_kept_for_the_checks(tmp_path: Path) -> None:
    write_configuration(tmp_path, seed="demo")
    command = [sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(tmp_path / "server.toml")]
    run = Run(target=parse_target("stdio:" + shlex.join(command)),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read by warm or watched
              eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=20.0)
    run.connections = {"legacy": None}  # type: ignore[dict-item]  # warm reads only the eras spoken
    try:
        run.warm({"watched"})
        deadline = time.monotonic() + 30
        while "legacy" not in run.watched_sessions and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "legacy" in run.watched_sessions, "the transcript was not taken before a check asked for it"
        transcript = run.watched_sessions["legacy"]
        assert transcript.received, "the background transcript holds no answer of the target"
        assert run.watched("legacy") is transcript, "a check took a second transcript instead of the one kept"
    finally:
        run.connections = {}
        run.close()


def _reference_run(tmp_path: Path) -> Run:
    write_configuration(tmp_path, seed="demo")
    command = [sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(tmp_path / "server.toml")]
    run = Run(target=parse_target("stdio:" + shlex.join(command)),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read by warm or the pool
              eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=20.0,
              explore=10)
    run.connections = {"legacy": None}  # type: ignore[dict-item]  # warm reads only the eras spoken
    return run


def _idle(run: Run, count: int) -> list[Connection]:
    deadline = time.monotonic() + 60
    while len(run.pool.idle("legacy")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return run.pool.idle("legacy")


def test_sessions_for_the_concurrent_clients_are_opened_ahead_and_each_lent_once(tmp_path: Path) -> None:
    run = _reference_run(tmp_path)
    try:
        run.warm({"concurrent"})
        spares = _idle(run, CONCURRENT_CLIENTS)
        assert len(spares) == CONCURRENT_CLIENTS, "the concurrent clients' sessions were not opened ahead"
        taken = [run.concurrent_session("legacy") for _ in range(CONCURRENT_CLIENTS)]
        assert sorted(map(id, taken)) == sorted(map(id, spares)), "a spare was not handed out, or handed out twice"
        another = run.concurrent_session("legacy")
        assert all(another is not conn for conn in taken), "a spare already taken was handed out again"
    finally:
        run.connections = {}
        run.close()


def test_the_background_checks_draw_on_the_concurrent_clients_sessions_given_back(tmp_path: Path) -> None:
    """Four background checks after three concurrent clients start four processes, not seven."""
    run = _reference_run(tmp_path)
    try:
        run.warm({"concurrent"})
        run.reserve_sessions("legacy", 4)
        opened = _idle(run, 4)
        assert len(opened) == 4, "the pool did not open the larger of the two needs"
        clients = [run.concurrent_session("legacy") for _ in range(CONCURRENT_CLIENTS)]
        for n, conn in enumerate(clients):
            conn.client = f"client{n + 1}"
        clients[0].consecutive_timeouts = 1  # its last call went unanswered: it may still be at work
        run.give_back("legacy", clients)
        background = [run.background_session("legacy") for _ in range(3)]
        assert sorted(map(id, background)) == sorted(map(id, opened[:1] + clients[1:])), (
            "the background checks did not get the sessions given back and the one still idle")
        assert {conn.client for conn in background} == {"session"}, "a lent session kept a concurrent client's name"
        assert len(run.extra) == 4, "a session was opened beyond the four the pool owns"
    finally:
        run.connections = {}
        run.close()


def test_no_spare_is_opened_over_http_or_without_exploration(tmp_path: Path) -> None:
    http = Run(target=parse_target("http://127.0.0.1:9/mcp"),
               profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read by warm
               eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0,
               explore=10)
    quiet = Run(target=parse_target("stdio:never-started"),
                profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read by warm
                eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    for run in (http, quiet):
        run.connections = {"legacy": None}  # type: ignore[dict-item]  # warm reads only the eras spoken
        before = threading.active_count()
        run.warm({"concurrent"})
        assert threading.active_count() <= before, f"a spare session was started for {run.target.label}"
