"""The harness holds against the target it judges: what a hostile target writes is read and judged, never lets it
pass unseen.

A target that writes four violations of MCP's transport rules is caught by the four transport checks; the same
target writing first one valid notification nested a hundred thousand levels deep (which ended the raw reader's
thread, so that the checks judged the few messages read before it, and the target was certified) is caught too,
and the deep line is named.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.reference._init import write_configuration

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
TRANSPORT = ("transport.stdout-only-mcp", "transport.jsonrpc-frames", "transport.responses-answer-requests",
             "transport.notifications-asked-for")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hostile") / "engram"
    write_configuration(directory, seed="hostile")
    return directory


def judged(home: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    command = [sys.executable, str(ROOT / "tests" / "hostile_target.py"), "--config", str(home / "server.toml"),
               *extra]
    done = subprocess.run([*CONFORMANCE, "--target", "stdio:" + shlex.join(command), "--profile",
                           str(home / "conformance-profile.toml"), "--select", "transport", "--era", "legacy",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, timeout=280)
    lines = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    checks = {line["check"]: line for line in lines if line["type"] == "check"}
    return done.returncode, checks, done.stdout + done.stderr


@pytest.mark.parametrize("deep", [False, True], ids=["plain", "deep-line-first"])
def test_every_transport_violation_is_caught_whatever_comes_first(home: Path, tmp_path: Path, deep: bool) -> None:
    code, checks, said = judged(home, tmp_path, *(["--deep-first"] if deep else []))
    assert code == 1, said[-3000:]
    assert {name: checks[name]["status"] for name in TRANSPORT} == dict.fromkeys(TRANSPORT, "FAIL"), said[-3000:]
    if deep:
        frames = checks["transport.jsonrpc-frames"]
        assert "nested deeper" in frames["message"] + frames.get("detail", ""), frames
