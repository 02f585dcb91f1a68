"""The harness tests the confirmation modes a profile declares, and only those (spec/profile.md, [confirmation]).

Selected runs against the reference over stdio, configured and described with
one mode or the other: the declared mode's checks run and pass, the other
mode's are not applicable, and the checks that merely need a gated call done
along the way confirm it the way the target can be confirmed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram_mcp.reference._init import write_configuration

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
SERVE = [sys.executable, "-m", "engram_mcp.reference._cli", "serve", "--config"]
BOTH = 'modes = ["host-reference", "server-initiated"]'
SELECT = ["gate", "confirmation-ref", "host", "wiring.order-of-checks", "lifecycle.forget"]


def configured(directory: Path, server_modes: str, profile_modes: str | None) -> Path:
    """An init directory whose server serves ``server_modes`` and whose profile declares ``profile_modes``
    (None: a profile without [confirmation], as written before the table existed)."""
    write_configuration(directory, seed=directory.name)
    server = directory / "server.toml"
    server.write_text(server.read_text(encoding="utf-8").replace(BOTH, server_modes), encoding="utf-8")
    profile = directory / "conformance-profile.toml"
    text = profile.read_text(encoding="utf-8")
    if profile_modes is None:
        text = re.sub(r"\[confirmation\]\nmodes = .*\nreference_ttl_seconds = \d+\n", "", text)
    else:
        text = text.replace(BOTH, profile_modes)
    profile.write_text(text, encoding="utf-8")
    return directory


def run(directory: Path) -> dict[str, set[str]]:
    """A selected run at the pins level; each check's statuses. It must end incomplete, with nothing failing."""
    report = directory / "report"
    target = "stdio:" + " ".join([*SERVE, str(directory / "server.toml")])
    command = [*CONFORMANCE, "--target", target, "--profile", str(directory / "conformance-profile.toml"),
               "--level", "profile", "--report-dir", str(report), *(f"--select={s}" for s in SELECT)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd="/")
    assert done.returncode == 5, done.stdout[-3000:] + done.stderr[-2000:]  # a selected run: incomplete at best
    statuses: dict[str, set[str]] = {}
    for line in (report / "report.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["type"] == "check":
            statuses.setdefault(entry["check"], set()).add(entry["status"])
    flagged = {c: s for c, s in statuses.items() if s - {"PASS", "SKIP", "N/A"}}
    assert flagged == {}, done.stdout[-3000:]
    return statuses


@pytest.mark.parametrize("profile_modes", ['modes = ["host-reference"]', BOTH])
def test_a_target_confirming_by_host_reference_only(tmp_path: Path, profile_modes: str) -> None:
    """Described as it is, it certifies on the reference checks; described with both modes, the harness notices."""
    directory = configured(tmp_path / "only", 'modes = ["host-reference"]', profile_modes)
    if profile_modes != BOTH:
        statuses = run(directory)
        assert statuses["confirmation-ref.execution-window"] == {"PASS"}
        assert statuses["gate.refusal"] == {"N/A"} and statuses["lifecycle.forget"] == {"PASS"}
        # No wait within a call, so nothing to cancel or outlive in flight; the deadline on arrival still applies.
        assert statuses["host.cancel-before-commit"] == {"N/A"}
        assert statuses["host.deadline-during-confirmation"] == {"N/A"}
        assert statuses["host.deadline-passed"] == {"PASS"}
        return
    done = subprocess.run([*CONFORMANCE, "--target", "stdio:" + " ".join([*SERVE, str(directory / "server.toml")]),
                           "--profile", str(directory / "conformance-profile.toml"), "--select", "gate.refusal",
                           "--era", "legacy"], capture_output=True, text=True, timeout=600, cwd="/")
    assert done.returncode == 1, "a profile declaring a mode the target does not serve fails that mode's checks"


def test_an_old_profile_tests_the_server_initiated_mode_only(tmp_path: Path) -> None:
    statuses = run(configured(tmp_path / "old", BOTH, None))
    assert statuses["gate.refusal"] == {"PASS"}
    # Not applicable without the mode; the execution window alone is not exercised: EMC-GATE-005 needs a reference.
    assert statuses.pop("confirmation-ref.execution-window") == {"SKIP"}
    assert all(s == {"N/A"} for c, s in statuses.items() if c.startswith("confirmation-ref."))
