"""Running the real ``conformance`` command line against a catalog variant, and reading what it concluded.

Both catalogs (tests/faulty and tests/benign) serve their variants as scripts (``python SCRIPT VARIANT --config
SERVER_TOML``); ``run`` starts one conformance run as a subprocess and ``Judgement`` holds its report.jsonl's
statuses, requirement verdicts and exit code.
"""

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class Judged(Protocol):
    """What a verdict on a faulty variant reads of it (read-only: the catalog's variants are frozen)."""

    @property
    def name(self) -> str: ...
    @property
    def breaks(self) -> tuple[str, ...]: ...
    @property
    def caught_by(self) -> tuple[str, ...]: ...
    @property
    def expect(self) -> str: ...


@dataclass
class Judgement:
    """What one conformance run concluded about a variant (or about the plain reference)."""

    name: str
    exit_code: int | None
    seconds: float
    statuses: dict[str, set[str]] = field(default_factory=dict)  # check id -> statuses over eras and params
    requirements: dict[str, str] = field(default_factory=dict)  # requirement id -> footer verdict
    problem: str = ""  # why the run could not be judged (timeout, no report)
    output: str = ""
    introspection: list[str] = field(default_factory=list)  # checks whose verdict quotes pytest, not the target
    python_spelling: list[str] = field(default_factory=list)  # checks whose verdict spells a value the Python way

    def flagged(self, check_id: str, status: str = "FAIL") -> bool:
        return status in self.statuses.get(check_id, set())

    @property
    def errors(self) -> list[str]:
        return sorted(c for c, s in self.statuses.items() if "ERROR" in s)

    @property
    def failing_checks(self) -> list[str]:
        return sorted(c for c, s in self.statuses.items() if "FAIL" in s)

    def caught(self, variant: Judged) -> list[str]:
        return [c for c in variant.caught_by if self.flagged(c, variant.expect)]

    def verdict(self, variant: Judged) -> str:
        """KILLED when the run judges the variant as the catalog says; otherwise why not."""
        if self.problem:
            return f"NOT JUDGED: {self.problem}"
        wrong = []
        # Every variant run is a --select run: a failure exits 1, anything else is at best incomplete (5).
        expected_exit = 1 if variant.expect == "FAIL" else 5
        if self.exit_code != expected_exit:
            wrong.append(f"exit code {self.exit_code}, not {expected_exit}")
        if not self.caught(variant):
            seen = {c: sorted(self.statuses.get(c, {"NOT RUN"})) for c in variant.caught_by}
            wrong.append(f"no {variant.expect} from {', '.join(variant.caught_by)} ({seen})")
        unjudged = [r for r in variant.breaks if self.requirements.get(r) != variant.expect]
        if unjudged:
            wrong.append(f"requirements not judged {variant.expect}: "
                         + ", ".join(f"{r}={self.requirements.get(r)}" for r in unjudged))
        if self.errors:
            wrong.append("ERROR in " + ", ".join(self.errors))
        if self.introspection:
            wrong.append("pytest's assertion introspection in the verdict of " + ", ".join(self.introspection))
        if self.python_spelling:
            wrong.append("Python spelling (None, a list or dict repr) in the verdicts of "
                         + ", ".join(self.python_spelling))
        return "KILLED" if not wrong else "SURVIVED: " + "; ".join(wrong)


def command(target: str, profile: Path, select: tuple[str, ...] | list[str], report_dir: Path, *, era: str = "both",
            call_timeout: float = 10.0, level: str = "contract", options: tuple[str, ...] = ()) -> list[str]:
    conformance = Path(sys.executable).with_name("conformance")
    program = [str(conformance)] if conformance.exists() else [sys.executable, "-m", "engram_mcp.conformance._cli"]
    line = [*program, "--target", target, "--profile", str(profile), "--report-dir", str(report_dir),
            "--era", era, "--call-timeout", str(call_timeout), "--level", level]
    for prefix in select:
        line += ["--select", prefix]
    return [*line, *options]


def script_target(script: Path, name: str, config: Path) -> str:
    """The stdio target that serves ``name`` of the catalog whose script is ``script``."""
    return "stdio:" + shlex.join([sys.executable, str(script), name, "--config", str(config)])


def reference_target(config: Path) -> str:
    return "stdio:" + shlex.join([sys.executable, "-m", "engram_mcp.reference._cli", "serve", "--config", str(config)])


def fresh_copy(template: Path, workdir: Path) -> Path:
    """A private copy of an initialised configuration folder (keys, profile, no store yet)."""
    copy_dir = workdir / "config"
    shutil.copytree(template, copy_dir, ignore=shutil.ignore_patterns("store"))
    return copy_dir


# What pytest writes about an assertion, which no verdict may quote: its rewritten `assert` line and diff hints.
PYTEST_ARTEFACTS = re.compile(r"(^|\n)\s*assert |Use -v to get more diff|use -vv to show|Full diff:|\+  where ")


def introspection_in(report: Path) -> list[str]:
    """The checks whose message or detail in report.jsonl carries pytest's introspection of an assertion."""
    quoting = set()
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        said = f"{entry.get('message', '')}\n{entry.get('detail', '')}"
        if entry["type"] == "check" and PYTEST_ARTEFACTS.search(said):
            quoting.add(entry["check"])
    return sorted(quoting)


# How Python spells a value, which no sentence for a reader may: None, True and False, a list or dict repr
# (['a', 'b'], {'k': …}), a set or an object's default repr. A reader gets JSON (null, true, ["a"]) or words.
PYTHON_SPELLING = re.compile(r"\bNone\b(?! of\b)|\b(True|False)\b|\[' |\['[^']*'[,\]]|\{'[^']*': |frozenset\(|"
                             r"\bset\(\)|<[\w.]+ object at 0x")


def python_spelling(text: str) -> str | None:
    """The first stretch of ``text`` that spells a value the Python way, or None."""
    found = PYTHON_SPELLING.search(text)
    return text[max(0, found.start() - 40):found.end() + 40] if found else None


def sentences_of(report: Path) -> dict[str, list[str]]:
    """What a reader reads in report.jsonl, by where: each check's message and detail, the verdict, the reasons
    a requirement was not exercised."""
    said: dict[str, list[str]] = {}
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["type"] == "check":
            said.setdefault(entry["check"], []).extend([entry.get("message", ""), entry.get("detail", "")])
        elif entry["type"] == "footer":
            said.setdefault("footer", []).append(entry["verdict"])
            for rid, verdict in entry["requirements"].items():
                said.setdefault(rid, []).extend(gap["reason"] for gap in verdict.get("not_exercised", []))
    return said


def python_spelling_in(report: Path) -> list[str]:
    """The checks (or requirements) whose sentences in report.jsonl spell a value the Python way, each with the
    first stretch that does."""
    found = []
    for where, texts in sorted(sentences_of(report).items()):
        stretch = next(filter(None, map(python_spelling, texts)), None)
        if stretch is not None:
            found.append(f"{where} ({stretch!r})")
    return found


def read_report(report: Path) -> tuple[int | None, dict[str, set[str]], dict[str, str]]:
    statuses: dict[str, set[str]] = {}
    requirements: dict[str, str] = {}
    exit_code = None
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["type"] == "check":
            statuses.setdefault(entry["check"], set()).add(entry["status"])
        elif entry["type"] == "footer":
            exit_code = entry["exit_code"]
            requirements = {rid: v["verdict"] for rid, v in entry["requirements"].items()}
    return exit_code, statuses, requirements


def run(name: str, target: str, profile: Path, select: tuple[str, ...] | list[str], workdir: Path, *,
        era: str = "both", timeout: float = 240.0, level: str = "contract", options: tuple[str, ...] = ()) -> Judgement:
    """One conformance run as a subprocess, judged from its report.jsonl."""
    report_dir = workdir / "report"
    started = time.monotonic()
    # A session of its own, so that a run that overstays is ended with the servers it started, and nothing else.
    process = subprocess.Popen(
        command(target, profile, select, report_dir, era=era, level=level, options=options),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=workdir,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return Judgement(name, None, time.monotonic() - started, problem=f"the run took over {timeout:.0f} s",
                         output=output[-3000:])
    seconds = time.monotonic() - started
    report = report_dir / "report.jsonl"
    if not report.exists():
        return Judgement(name, process.returncode, seconds, problem=f"no report (exit {process.returncode})",
                         output=output[-3000:])
    exit_code, statuses, requirements = read_report(report)
    if exit_code != process.returncode:
        return Judgement(name, process.returncode, seconds, statuses, requirements, output=output[-3000:],
                         problem=f"the report says exit {exit_code}, the process exited {process.returncode}")
    return Judgement(name, exit_code, seconds, statuses, requirements, output=output[-3000:],
                     introspection=introspection_in(report), python_spelling=python_spelling_in(report))


@contextlib.contextmanager
def served_over_http(script: Path, name: str, config: Path, workdir: Path) -> Iterator[str]:
    """The variant served over streamable HTTP on a free loopback port, for as long as the block runs."""
    import httpx2

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    url = f"http://127.0.0.1:{port}/mcp"
    with open(workdir / "server.log", "w") as log:  # the server writes to its own copy of the handle
        process = subprocess.Popen([sys.executable, str(script), name, "--config", str(config),
                                    "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
    try:
        ready_by = time.monotonic() + 30
        while time.monotonic() < ready_by and process.poll() is None:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
