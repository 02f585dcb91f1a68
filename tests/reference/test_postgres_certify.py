"""The reference on PostgreSQL, certified like the embedded store: the whole suite, both eras, over stdio.

``engram-reference init --store`` writes the configuration; the harness then
starts the server itself, a process per session, every one on the session's
schema (so they share one store, as replicas do); ``verify`` checks the shared store's
chains afterwards. Slow (a few minutes): CI runs it with ``pytest -m slow``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.postgres_support import postgres_url
from tests.reference.conftest import ENGRAM

__all__ = ["postgres_url"]  # the fixture, imported for pytest to find

_BIN = Path(sys.executable).parent
CONFORMANCE = (
    [str(_BIN / "conformance")] if (_BIN / "conformance").exists() else [sys.executable, "-m",
                                                                          "engram_mcp.conformance._cli"]
)
RUN_TIMEOUT = 900  # seconds; a hang fails the test


@pytest.mark.slow
def test_the_reference_on_postgresql_is_conformant_over_stdio_in_both_eras(postgres_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "engram"
    init = subprocess.run([*ENGRAM, "init", str(directory), "--store", postgres_url], capture_output=True,
                          text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    config = directory / "server.toml"
    assert tomllib.loads(config.read_text(encoding="utf-8"))["store"]["url"] == postgres_url
    target = "stdio:" + shlex.join([*ENGRAM, "serve", "--config", str(config)])
    run = subprocess.run(
        [*CONFORMANCE, "--target", target, "--profile", str(directory / "conformance-profile.toml"), "--era", "both",
         "--format", "json", "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    summary = json.loads(run.stdout)
    assert run.returncode == 0 and summary["conformant"], run.stderr[-4000:]
    assert summary["eras"] == ["legacy", "modern"]
    assert summary["scored_musts"]["failed"] == 0 and summary["scored_musts"]["not_exercised"] == 0
    # The server wrote to PostgreSQL, not to a SQLite file beside the configuration.
    assert not (directory / "store").exists()
    verify = subprocess.run([*ENGRAM, "verify", "--config", str(config)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "FAIL" not in verify.stdout


def test_init_refuses_a_store_url_it_cannot_serve(tmp_path: Path) -> None:
    refused = subprocess.run([*ENGRAM, "init", str(tmp_path / "engram"), "--store", "mysql://db/engram"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "--store" in refused.stderr and "mysql" not in refused.stderr  # the input is never echoed
    assert not (tmp_path / "engram").exists()

