"""A profile whose grants are not the target's is the profile's mistake, said before any check, with exit 3.

The target here is the reference on its own configuration; only the profile is edited. A target that
contradicts its own listing (lists a tool it then refuses) stays the target's defect: the faulty catalog's
``every-tool-listed`` variant is caught by discovery.granted-tools, in the slow run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engram_mcp.reference._init import write_configuration

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance"]
SERVE = [sys.executable, "-m", "engram_mcp.reference", "serve"]
LIMITED = '"agent-limited" = ["engram_memory_search", "engram_memory_get", "engram_memory_capture"]'


@pytest.fixture(scope="module")
def configuration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("grants") / "reference"
    write_configuration(directory, seed="grants")
    return directory


# The edit of agent-limited's grants in the primary scope, and the two lists the diagnosis must show in full.
EDITS = {
    "grants-more": ('"agent-limited" = ["engram_memory_search", "engram_memory_get", "engram_memory_capture", '
                    '"engram_memory_forget"]',
                    "[engram_memory_capture, engram_memory_forget, engram_memory_get, engram_memory_search]"),
    "grants-less": ('"agent-limited" = ["engram_memory_search"]', "[engram_memory_search]"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_grants_the_target_does_not_give_are_a_profile_diagnosis(tmp_path: Path, configuration: Path,
                                                                 edit: str) -> None:
    line, profile_list = EDITS[edit]
    text = (configuration / "conformance-profile.toml").read_text(encoding="utf-8")
    assert LIMITED in text
    profile = configuration / f"profile-{edit}.toml"  # beside the original: its key paths are relative
    profile.write_text(text.replace(LIMITED, line, 1), encoding="utf-8")
    target = "stdio:" + " ".join([*SERVE, "--config", str(configuration / "server.toml")])
    ran = subprocess.run([*CONFORMANCE, "--target", target, "--profile", str(profile), "--report-dir",
                          str(tmp_path / "report")], capture_output=True, text=True, timeout=300, cwd="/")
    out = ran.stdout + ran.stderr
    assert ran.returncode == 3, out[-3000:]
    first = next(i for i, text in enumerate(out.splitlines()) if text.startswith("PROFILE DOES NOT FIT THE TARGET"))
    assert "scope acme/research" in out.splitlines()[first]
    shown = f"  agent-limited: the profile grants {profile_list}; the target lists and serves " \
            "[engram_memory_capture, engram_memory_get, engram_memory_search]"
    assert shown in out.splitlines(), out[-3000:]
    assert "checks: none ran, the profile does not fit the target" in out
    assert "VERDICT: not judged (the profile does not fit the target: correct the profile)" in out
    assert "a MUST failed" not in out and "FAIL" not in out


def test_the_unedited_profile_fits(tmp_path: Path, configuration: Path) -> None:
    target = "stdio:" + " ".join([*SERVE, "--config", str(configuration / "server.toml")])
    profile = configuration / "conformance-profile.toml"
    ran = subprocess.run([*CONFORMANCE, "--target", target, "--profile", str(profile),
                          "--select", "discovery.granted-tools", "--report-dir", str(tmp_path / "report")],
                         capture_output=True, text=True, timeout=300, cwd="/")
    assert ran.returncode == 5 and "checks: 2 PASS" in ran.stdout, ran.stdout[-3000:]  # both eras, a partial run
    assert "DOES NOT FIT" not in ran.stdout
