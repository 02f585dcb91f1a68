"""What tests/test_thirdparty.py runs its third-party programs with: processes that never outlive a test, a
reference configuration with its test host, harness runs read back from report.jsonl, and the README's blocks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.contract.binding import load_private_key, mint_binding

ROOT = Path(__file__).resolve().parents[1]
THIRDPARTY = ROOT / "tests" / "thirdparty"
NODE_MODULES = THIRDPARTY / "node_modules"
SCOPED = NODE_MODULES / "@modelcontextprotocol"
BIN = Path(sys.executable).parent


def _script(name: str, module: str) -> list[str]:
    """The installed command next to this interpreter; ``python -m`` where it was not installed."""
    path = BIN / name
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


CONFORMANCE = _script("conformance", "engram_mcp.conformance._cli")
ENGRAM = _script("engram-reference", "engram_mcp.reference._cli")
TRACEBACK = "Traceback (most recent call last)"

# Seconds. A run that takes longer has hung; the usual run takes a fraction of this.
NODE_TIMEOUT = 60
START_TIMEOUT = 30
NPX_TIMEOUT = 600  # a first run of a README block fetches node@22 and the named package from the npm registry


def node_missing() -> str | None:
    try:
        subprocess.run(["node", "--version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return "Node.js is not installed (node is needed for the third-party MCP packages)"
    if not (SCOPED / "conformance" / "package.json").exists():
        return "tests/thirdparty/node_modules is missing: run `npm ci --prefix tests/thirdparty`"
    return None


# -- processes -----------------------------------------------------------------


def stop(process: subprocess.Popen[Any]) -> None:
    """End a process started in a session of its own, and everything it started."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def run_command(command: list[str], *, timeout: float, cwd: Path | None = None) -> tuple[int, str, str, float]:
    """Run a command to its end; a hang fails the test and leaves nothing running."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               text=True, cwd=cwd, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(process)
        pytest.fail(f"{shlex.join(command)[:300]} did not finish within {timeout} s: it hung")
    return process.returncode, stdout, stderr, time.monotonic() - started


def port_pair() -> int:
    """A port free on both 127.0.0.1 and 127.0.0.2 (conformance bearer-bridge --help says why the same number)."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.2", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port is free on both 127.0.0.1 and 127.0.0.2")


def wait_for(address: tuple[str, int], process: subprocess.Popen[Any], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode} before listening on {address[0]}:{address[1]}")
        try:
            with socket.create_connection(address, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    stop(process)
    pytest.fail(f"{what} did not listen on {address[0]}:{address[1]} within {START_TIMEOUT} s")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the reference configuration and its host ------------------------------------


@dataclass
class ReferenceDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "server.toml"

    @property
    def profile(self) -> Path:
        return self.path / "conformance-profile.toml"

    @property
    def bearer(self) -> str:
        return (self.path / "keys" / "http-bearer.txt").read_text(encoding="utf-8").strip()

    def binding(self, tenant: str = "acme", workspace: str = "research", principal: str = "agent-full") -> str:
        """A host binding as the profile's test host mints it (spec/host-wiring.md §1)."""
        profile = tomllib.loads(self.profile.read_text(encoding="utf-8"))
        key = load_private_key((self.path / profile["binding"]["private_key_file"]).read_bytes())
        return mint_binding(key, profile["binding"]["kid"], audience=profile["target"]["audience"],
                            issuer=profile["binding"]["issuer"], tenant=tenant, workspace=workspace,
                            principal=principal, agent_id="inspector", session="inspector",
                            purpose_ref=profile["binding"]["purpose_ref"], lifetime=60)

    @property
    def purpose(self) -> str:
        return tomllib.loads(self.profile.read_text(encoding="utf-8"))["binding"]["purpose_ref"]


def init_reference(path: Path) -> ReferenceDir:
    code, _, stderr, _ = run_command([*ENGRAM, "init", str(path)], timeout=60)
    assert code == 0, stderr
    return ReferenceDir(path)


# -- harness runs --------------------------------------------------------------


@dataclass
class HarnessRun:
    target: str
    code: int
    stdout: str
    stderr: str
    elapsed: float
    header: dict[str, Any]
    checks: list[dict[str, Any]]
    footer: dict[str, Any]

    def results(self, check: str, era: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.checks if r["check"] == check and (era is None or r["era"] == era)]

    def statuses(self, check: str, era: str | None = None) -> Counter[str]:
        return Counter(r["status"] for r in self.results(check, era))

    def failed(self) -> set[str]:
        return {r["check"] for r in self.checks if r["status"] == "FAIL"}


def run_harness(target: str, profile: Path | None, report_dir: Path, timeout: float, *options: str) -> HarnessRun:
    given = ["--profile", str(profile)] if profile is not None else []
    command = [*CONFORMANCE, "--target", target, *given, "--report-dir", str(report_dir), *options]
    code, stdout, stderr, elapsed = run_command(command, timeout=timeout)
    report = report_dir / "report.jsonl"
    assert report.exists(), f"no report.jsonl (exit {code}); stderr: {stderr[-2000:]}"
    lines = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
    header = next(x for x in lines if x["type"] == "header")
    footer = next(x for x in lines if x["type"] == "footer")
    checks = [x for x in lines if x["type"] == "check"]
    return HarnessRun(target, code, stdout, stderr, elapsed, header, checks, footer)


# -- the README's blocks ---------------------------------------------------------


def readme_block(heading: str) -> str:
    """The one ```sh block of the README section under this heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    _, found, rest = readme.partition(f"\n{heading}\n")
    assert found, f"README.md has no section {heading!r}"
    blocks = re.findall(r"```sh\n(.*?)\n```", re.split(r"\n#{2,3} ", rest, maxsplit=1)[0], re.S)
    assert len(blocks) == 1, f"{heading}: {len(blocks)} sh blocks, not one"
    return blocks[0]


def blocks_cannot_run() -> str | None:
    if shutil.which("npx") is None or shutil.which("bash") is None:
        return "npx and bash are needed to run the README's blocks"
    if not (Path(sys.prefix) / "bin" / "engram-reference").exists():
        return f"{sys.prefix} has no bin/engram-reference: the README's blocks run the installed commands"
    return None


def run_readme_block(heading: str, workdir: Path, port: int) -> tuple[int, str, str]:
    """The block run by bash in ``workdir``, whose .venv is this interpreter's; its port 8765 becomes ``port``."""
    block = readme_block(heading)
    assert "8765" in block, f"{heading}: the block no longer names the port 8765 the test replaces"
    (workdir / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    script = workdir / "block.sh"
    script.write_text(block.replace("8765", str(port)), encoding="utf-8")
    # Files, not pipes: a server the block left running would hold a pipe open after bash has ended.
    with (workdir / "stdout").open("w") as out, (workdir / "stderr").open("w") as err:
        process = subprocess.Popen(["bash", "-eu", "-o", "pipefail", str(script)], cwd=workdir, stdout=out,
                                   stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = process.wait(timeout=NPX_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # Whatever the block started in the background and did not stop (it ended before its `kill`).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    if code is None:
        process.wait(timeout=10)
        pytest.fail(f"{heading}: the block did not finish within {NPX_TIMEOUT} s")
    return code, (workdir / "stdout").read_text(), (workdir / "stderr").read_text()


def json_documents(text: str) -> list[Any]:
    """The JSON values printed one after the other, as each inspector call prints its reply, after what `init`
    printed (the files it wrote, one a line)."""
    decoder, documents = json.JSONDecoder(), []
    start = re.search(r"^\{", text, re.M)
    text = text[start.start():].rstrip() if start else ""
    at = 0
    while at < len(text):
        try:
            document, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            pytest.fail(f"not JSON at offset {at}: {text[at:at + 500]!r}")
        documents.append(document)
        at = len(text) - len(text[end:].lstrip())
    return documents
