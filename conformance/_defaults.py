"""What the command line needs to know before it loads the harness: the version, the files a run writes, the
exploration budgets, and the suite's checks as data (spec/checks.json).

Nothing here imports the MCP SDK, pytest or the suite, so a usage error (a mistyped --select, an unknown --tool)
is said in the time it takes to start Python and read the contract's data.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from engram_mcp.contract import load

DISTRIBUTION = "engram-memory-mcp"
EXIT_CONFORMANT, EXIT_MUST_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_STALE, EXIT_INCOMPLETE = 0, 1, 2, 3, 4, 5
EXIT_NOT_ENGRAM = 6  # the target answers MCP but offers none of the six Engram memory tools
REPORT_FILE = "report.jsonl"
ATTESTATION_FILE = REPORT_FILE + ".intoto.jsonl"  # in-toto's bundle naming: the attestation beside what it signs
# Every file a run may leave in its report directory.
REPORT_FILES = (REPORT_FILE, "report.md", "certificate.md", "report.html", "junit.xml", "badge.json")
# Calls per era that exploration (explore.*) makes: the default budget, and the one --deep raises it to.
EXPLORE_DEFAULT, EXPLORE_DEEP = 120, 1200
REPLAY_CHECK = "explore.replay"  # runs only when --replay names a counterexample


LEVELS = ("contract", "pins")  # what a run scores: the contract (and the wiring it needs), or this project's pins too


def level_name(given: str) -> str:
    """A --level as given; ``profile``, the name the pins level had before, still means it."""
    return "pins" if given == "profile" else given


def harness_version() -> str:
    """The installed package's version: the one number the harness reports everywhere."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


@cache
def checks() -> tuple[dict[str, Any], ...]:
    """The suite's checks as spec/checks.json holds them (id, requirements, tools, needs)."""
    return tuple(load().document("spec", "checks.json")["checks"])


def check_ids() -> frozenset[str]:
    return frozenset(entry["id"] for entry in checks())


def modules_for(select: list[str], tools: list[str]) -> list[str] | None:
    """The suite modules that hold a check a partial run selects (by id or requirement prefix, and by tool), so
    that pytest collects those alone; None for a full run, which collects the whole suite."""
    if not select and not tools:
        return None
    picked = [entry for entry in checks()
              if (not select or any(name.startswith(p) for name in (entry["id"], *entry["requirements"])
                                    for p in select))
              and (not tools or "served" in entry["uses"] or set(tools) & set(entry["tools"]))]
    return sorted({entry["module"] for entry in picked})
