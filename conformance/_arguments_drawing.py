"""The schemathesis families' argument cases for the suite's arguments.* checks, drawn in a child process.

The suite's arguments module starts a Drawing when it starts and reads its
cases when the schemathesis checks, drawn last, ask for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance._fuzz.kept_draws import cache_home

TOOLS = fuzz.TOOLS

DRAWN = ("schemathesis-positive", "schemathesis-negative")


class Drawing:
    """The schema-driven cases, drawn by a child process while the first checks make their calls.

    Drawing is pure computation; in a process of its own it runs on the core
    the harness leaves idle while it waits for the target. It is the module's
    own inspection command (python -m engram_mcp.conformance._fuzz), so what it
    hands over is exactly what that command prints.
    """

    def __init__(self, seed: int, examples: int, purpose: str) -> None:
        self.key = (seed, examples, purpose)
        # Read after the generator process ends; closed with this object.
        self.output = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed by _collect or stop
        command = [sys.executable, "-m", "engram_mcp.conformance._fuzz", "--full", "--seed", str(seed),
                   "--examples", str(examples), "--purpose", purpose]
        for family in DRAWN:
            command += ["--family", family]
        try:
            self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
                command, stdout=self.output, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                env={**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": _hypothesis_home()})
        except OSError:
            self.process = None
        self._cases: dict[tuple[str, str], tuple[fuzz.Case, ...]] | None = None

    def cases(self, family: str, tool: str) -> tuple[fuzz.Case, ...]:
        if self._cases is None:
            self._cases = self._collect()
        return self._cases.get((family, tool), ())

    def _collect(self) -> dict[tuple[str, str], tuple[fuzz.Case, ...]]:
        seed, examples, purpose = self.key
        found: dict[tuple[str, str], list[fuzz.Case]] = {(f, t): [] for f in DRAWN for t in TOOLS}
        try:
            if self.process is None or self.process.wait(timeout=600) != 0:
                raise ValueError("the drawing process failed")
            self.output.seek(0)
            for line in self.output:
                case = fuzz.Case.from_json(json.loads(line))
                found[(case.family, case.tool)].append(case)
        except (ValueError, KeyError, subprocess.TimeoutExpired):
            self.stop()
            found = {(f, t): fuzz.cases(f, t, seed=seed, examples=examples, purpose=purpose)
                     for f in DRAWN for t in TOOLS}
        finally:
            self.output.close()
        return {key: tuple(value) for key, value in found.items()}

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._cases is None:
            self.output.close()


def _hypothesis_home() -> str:
    """Where the drawing process keeps hypothesis's caches: the user's cache, never the working directory."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return os.environ["HYPOTHESIS_STORAGE_DIRECTORY"]
    home = cache_home("hypothesis")
    return str(home) if home is not None else tempfile.mkdtemp(prefix="engram-conformance-hypothesis-")
