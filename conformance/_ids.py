"""The ids a user types (--select, --expected-failures, explain) checked against the known ones.

The known ids are never a typed list: they are the collected suite's check ids
and the requirement catalog's ids, so a check another branch adds is known as
soon as it is in the suite. A typo is a usage error with a "did you mean",
not a silent partial run.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from engram_mcp.contract import load
from engram_mcp.contract._words import quoted

_BASELINE_ENTRY = re.compile(r"^(?P<check>[^@\[\]]+)(?:@(?P<era>[^\[\]]+)(?:\[(?P<case>.+)\])?)?$")


def requirement_ids() -> frozenset[str]:
    return frozenset(entry["id"] for entry in load().requirements["requirements"])


def _stems(ids: Iterable[str]) -> set[str]:
    """Every id and every family it is in ("discovery" of "discovery.unknown-tool", "EMC-HOST" of "EMC-HOST-006"):
    a mistyped prefix is closest to a family, not to a whole id."""
    stems: set[str] = set()
    for identifier in ids:
        stems.add(identifier)
        separator = "." if "." in identifier else "-"  # check ids are family.name, requirement ids EMC-AREA-NNN
        for cut in re.finditer(re.escape(separator), identifier):
            stems.add(identifier[:cut.start()])
    return stems


def did_you_mean(typed: str, known: Iterable[str]) -> str:
    """" (did you mean 'x'?)" with the closest known ids or families, or "" when none is close."""
    close = difflib.get_close_matches(typed, sorted(_stems(known)), n=3, cutoff=0.75)
    if not close:
        close = difflib.get_close_matches(typed.lower(), sorted(_stems(known)), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(quoted(c) for c in close)}?)" if close else ""


def unknown_prefix_errors(prefixes: Iterable[str], known: Iterable[str]) -> list[str]:
    """One sentence for each --select prefix that starts no known id."""
    known = sorted(set(known))
    return [f"--select {quoted(prefix)} matches no check or requirement id{did_you_mean(prefix, known)}"
            for prefix in prefixes if not any(identifier.startswith(prefix) for identifier in known)]


def unknown_baseline_errors(entries: Iterable[str], checks: Iterable[str], eras: Iterable[str]) -> list[str]:
    """One sentence for each baseline entry that names no check (or no era) of the suite."""
    checks, eras = sorted(set(checks)), sorted(set(eras))
    problems = []
    for entry in sorted(entries):
        parsed = _BASELINE_ENTRY.match(entry)
        if parsed is None:
            problems.append(f"--expected-failures: {quoted(entry)} is not check, check@era or check@era[case]")
        elif parsed["check"] not in checks:
            problems.append(f"--expected-failures: {quoted(entry)} names no check of the suite"
                            f"{did_you_mean(parsed['check'], checks)}")
        elif parsed["era"] is not None and parsed["era"] not in eras:
            problems.append(f"--expected-failures: {quoted(entry)} names no era (the eras are {', '.join(eras)})")
    return problems


def read_baseline(path: str | Path | None) -> frozenset[str]:
    """The baseline file: one entry a line (check, check@era or check@era[case]); ``#`` starts a comment."""
    if not path:
        return frozenset()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return frozenset(entry for entry in (line.split("#", 1)[0].strip() for line in lines) if entry)
