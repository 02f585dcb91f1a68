"""MCP's stdio transport: the target's stdout carries MCP messages only; stderr is the target's own."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engram_mcp.conformance._connect import Era, parse_target
from engram_mcp.conformance._raw import RawSession, _is_jsonrpc
from engram_mcp.reference._init import write_configuration

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance"]
SERVE = [sys.executable, "-m", "engram_mcp.reference", "serve"]


@pytest.fixture(scope="module")
def configuration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hygiene") / "reference"
    write_configuration(directory, seed="hygiene")
    return directory


def _wrapper(tmp_path: Path, configuration: Path, *, stdout: str, stderr: str) -> str:
    """A shell wrapper, as implementers write them: it echoes something, then runs the reference."""
    script = tmp_path / "serve.sh"
    serve = shlex.join([*SERVE, "--config", str(configuration / "server.toml")])
    script.write_text(f"#!/bin/sh\n{stdout}\n{stderr}\nexec {serve}\n", encoding="utf-8")
    script.chmod(0o755)
    return f"stdio:{script}"


def test_a_line_is_mcp_when_it_is_a_json_rpc_message() -> None:
    assert _is_jsonrpc('{"jsonrpc":"2.0","id":1,"result":{}}\n')
    assert _is_jsonrpc('[{"jsonrpc":"2.0","method":"notifications/message"}]')
    for noise in ("Starting server", '{"level":"info","msg":"up"}', "[]", "42", '{"jsonrpc":"1.0","id":1}'):
        assert not _is_jsonrpc(noise), noise


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_raw_session_sees_every_non_mcp_line_and_only_those(tmp_path: Path, configuration: Path, era: Era) -> None:
    target = _wrapper(tmp_path, configuration, stdout="echo 'Engram starting'; echo '{\"ready\": true}'",
                      stderr="echo 'a log line' >&2")
    session = RawSession(parse_target(target), era, 30.0)
    try:
        session.open()
        assert session.list_tools({}).kind == "result"
    finally:
        session.close()
    assert session.noise == ["Engram starting", '{"ready": true}']  # stderr is not looked at


def _transport_run(target: str, report: Path) -> tuple[int, dict[str, str]]:
    ran = subprocess.run([*CONFORMANCE, "--target", target, "--select", "transport", "--report-dir", str(report)],
                         capture_output=True, text=True, timeout=300, cwd="/")
    checks = {f"{e['check']}@{e['era']}": e["status"] for e in map(json.loads, (report / "report.jsonl").read_text(
        encoding="utf-8").splitlines()) if e["type"] == "check"}
    return ran.returncode, checks


def test_banner_lines_on_stdout_fail_the_check(tmp_path: Path, configuration: Path) -> None:
    code, checks = _transport_run(_wrapper(tmp_path, configuration, stdout="echo 'Engram memory server'", stderr=""),
                                  tmp_path / "report")
    assert code == 1 and _failing(checks) == {"transport.stdout-only-mcp"}, checks


def _failing(checks: dict[str, str]) -> set[str]:
    """The checks that failed, once each era agreed; every other check of the family passed."""
    failed = {name.split("@")[0] for name, status in checks.items() if status == "FAIL"}
    assert all(checks[f"{name}@{era}"] == "FAIL" for name in failed for era in ("legacy", "modern")), checks
    assert {s for n, s in checks.items() if n.split("@")[0] not in failed} == {"PASS"}, checks
    return failed


# One JSON-RPC line a wrapper writes before the server starts, and the one check it must fail.
MISPLACED = {
    "null-id": ('{"jsonrpc":"2.0","id":null,"method":"ping"}', "transport.jsonrpc-frames"),
    "both-result-and-error": ('{"jsonrpc":"2.0","id":"s","result":{},"error":{"code":1,"message":"x"}}',
                              "transport.jsonrpc-frames"),
    "unknown-id": ('{"jsonrpc":"2.0","id":"stale","result":{}}', "transport.responses-answer-requests"),
    "unasked-progress": ('{"jsonrpc":"2.0","method":"notifications/progress",'
                         '"params":{"progressToken":"t","progress":1}}', "transport.notifications-asked-for"),
}


@pytest.mark.parametrize("case", list(MISPLACED))
def test_a_misplaced_message_fails_its_check_alone(tmp_path: Path, configuration: Path, case: str) -> None:
    line, failing = MISPLACED[case]
    target = _wrapper(tmp_path, configuration, stdout=f"echo {shlex.quote(line)}", stderr="")
    code, checks = _transport_run(target, tmp_path / "report")
    assert code == 1 and _failing(checks) == {failing}, checks


def test_logs_on_stderr_pass_it(tmp_path: Path, configuration: Path) -> None:
    code, checks = _transport_run(_wrapper(tmp_path, configuration, stdout="", stderr="echo 'starting' >&2"),
                                  tmp_path / "report")
    assert code == 5 and set(checks.values()) == {"PASS"}, checks  # a --select run is at best incomplete
