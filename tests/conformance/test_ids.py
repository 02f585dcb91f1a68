"""Typed ids checked against the known ones: prefixes, baseline entries, and the suggestion."""

from __future__ import annotations

from engram_mcp.conformance._ids import did_you_mean, unknown_baseline_errors, unknown_prefix_errors

CHECKS = ["discovery.granted-tools", "discovery.unknown-tool", "not-found.get", "search.limit"]


def test_a_prefix_of_any_id_is_known_and_a_typo_is_not() -> None:
    assert unknown_prefix_errors(["discovery", "not-found.g", "EMC-"], [*CHECKS, "EMC-HOST-006"]) == []
    [problem] = unknown_prefix_errors(["serch"], CHECKS)
    assert problem == "--select 'serch' matches no check or requirement id (did you mean 'search'?)"


def test_the_suggestion_is_a_family_or_an_id_and_nothing_far_off() -> None:
    assert did_you_mean("discovry", CHECKS) == " (did you mean 'discovery'?)"
    assert did_you_mean("EMC-HOST-0066", ["EMC-HOST-006", "EMC-GATE-001"]).startswith(" (did you mean 'EMC-HOST-006'")
    assert did_you_mean("zzz", CHECKS) == ""


def test_baseline_entries_name_a_check_and_an_era() -> None:
    assert unknown_baseline_errors(["search.limit", "search.limit@legacy", "search.limit@modern[a b]"],
                                   CHECKS, ["legacy", "modern"]) == []
    problems = unknown_baseline_errors(["serch.limit", "search.limit@future", "@legacy"], CHECKS, ["legacy", "modern"])
    assert len(problems) == 3
    assert "(did you mean 'search.limit'?)" in problems[2]
