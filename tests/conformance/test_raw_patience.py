"""A raw session under load: one answer later than the call timeout is waited for once more before the session
is taken for one that drops requests (which then fails every later raw case at once)."""

from __future__ import annotations

import sys
from pathlib import Path

from engram_mcp.conformance._connect import Target
from engram_mcp.conformance._raw import RawSession

# Answers initialize at once and each tools/call after DELAY seconds; a call whose name is "drop" never.
SLOW_SERVER = r'''
import json, sys, time
delay = float(sys.argv[1])
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "tools/call":
        if message["params"]["name"] == "drop":
            continue
        time.sleep(delay)
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}), flush=True)
'''


def _session(tmp_path: Path, delay: float) -> RawSession:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SERVER, encoding="utf-8")
    session = RawSession(Target("stdio", command=(sys.executable, str(script), str(delay))), "legacy", 1.0)
    session.open()
    return session


def test_an_answer_later_than_the_timeout_still_counts(tmp_path: Path) -> None:
    session = _session(tmp_path, delay=1.5)  # past the 1 s timeout, within the one more wait
    try:
        first, second = session.call("late", {}, {}), session.call("late", {}, {})
    finally:
        session.close()
    assert (first.kind, second.kind) == ("result", "result")
    assert not session.silent


def test_a_dropped_request_still_makes_the_session_silent(tmp_path: Path) -> None:
    session = _session(tmp_path, delay=0.0)
    try:
        dropped = session.call("drop", {}, {})
        after = session.call("late", {}, {})
    finally:
        session.close()
    assert dropped.kind == "timeout" and session.silent
    assert after.kind == "timeout", "a silent session answers at once instead of waiting again"
