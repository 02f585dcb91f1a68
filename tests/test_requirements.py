"""The requirement catalog agrees with its schema, with spec/contract.md and with the contract data."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engram_mcp.contract import load

ROOT = Path(__file__).resolve().parent.parent

ANY_ID = re.compile(r"EMC-[A-Z]+-[0-9]{3}")
BULLET = re.compile(r"^- \*\*(EMC-[A-Z]+-[0-9]{3})\*\* \((MUST NOT|MUST|SHOULD NOT|SHOULD|MAY)\)(.*)$")
# spec/host-wiring.md states each requirement as a paragraph: **EMC-HP-001** (MUST). Text…
PROFILE_PARAGRAPH = re.compile(r"^\*\*(EMC-HP-[0-9]{3})\*\* \((MUST NOT|MUST|SHOULD NOT|SHOULD|MAY)\)\.", re.M)
MARKERS = re.compile(r"^\s*\*([^*]+)\*")
LIMIT_LIKE = re.compile(r"`([a-z_]+(?:\.[a-z_]+)*\.(?:min|max|min_bytes|max_bytes|default|execute_within))`")

# The points the source contract itself marks as not established, each with a
# word that the summary of an unverified requirement in that section must use.
UNVERIFIED_POINTS = {
    "how the host tells the agent its purpose_ref": ("§0", "purpose_ref"),
    "the unit of primary_event.at": ("§2 capture", "primary_event.at"),
    "the meaning of an admission duplicate_exact": ("§2 request_admission", "duplicate_exact"),
    "the canonicalisation behind content_digest": ("§3 item 4", "content_digest"),
    "the owner-level retention value": ("§3 item 6", "retention"),
}


# -- fixtures --------------------------------------------------------------


@pytest.fixture(scope="module")
def catalog() -> dict[str, Any]:
    return load().requirements


@pytest.fixture(scope="module")
def requirements(catalog: dict[str, Any]) -> list[dict[str, Any]]:
    return catalog["requirements"]


@pytest.fixture(scope="module")
def by_id(requirements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in requirements}


@pytest.fixture(scope="module")
def contract_md() -> str:
    return load().text("spec", "contract.md")


@pytest.fixture(scope="module")
def bullets(contract_md: str) -> list[tuple[str, str, str]]:
    """(id, level, text) of every requirement bullet, continuation lines joined."""
    found: list[tuple[str, str, str]] = []
    current: list[str] | None = None
    for line in contract_md.splitlines() + [""]:
        match = BULLET.match(line)
        if (match or not line.strip() or line.startswith(("- ", "#", "|"))) and current is not None:
            found.append((current[0], current[1], " ".join(current[2:]).strip()))
            current = None
        if match:
            current = [match.group(1), match.group(2), match.group(3)]
        elif current is not None:
            current.append(line.strip())
    return found


@pytest.fixture(scope="module")
def traceability() -> Iterator[ModuleType]:
    """tools/ is not a package, so the script is loaded from its path."""
    name = "engram_tools_traceability"
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "traceability.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def markers(text: str) -> set[str]:
    match = MARKERS.match(text)
    if match is None:
        return set()
    return {part.strip() for part in match.group(1).split(".") if part.strip()}


# -- the catalog against its schema ----------------------------------------


def test_catalog_validates_against_its_schema(catalog: dict[str, Any]) -> None:
    schema = load().data_schema("requirements")
    Draft202012Validator.check_schema(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in load().validator(schema).iter_errors(catalog)]
    assert errors == []


def _break(entry: dict[str, Any], field: str, value: Any) -> None:
    entry[field] = value


MALFORMED = {
    "unknown member": lambda e: _break(e, "owner", "nobody"),
    "lowercase id": lambda e: _break(e, "id", "EMC-cap-001"),
    "two-digit id": lambda e: _break(e, "id", "EMC-CAP-01"),
    "unknown level": lambda e: _break(e, "level", "REQUIRED"),
    "unknown status": lambda e: _break(e, "status", "draft"),
    "unknown source": lambda e: _break(e, "source", "folklore"),
    "unknown era": lambda e: _break(e, "eras", ["future"]),
    "bad check id": lambda e: _break(e, "checks", ["Capture_Replay"]),
    "unobservable without exclusion": lambda e: e.update(observable=False, exclusion=None),
    "observable with exclusion": lambda e: e.update(observable=True, exclusion="a reason"),
    "empty tool list": lambda e: _break(e, "tools", []),
}


@pytest.mark.parametrize("breakage", sorted(MALFORMED))
def test_schema_refuses_malformed_entries(catalog: dict[str, Any], breakage: str) -> None:
    broken = copy.deepcopy(catalog)
    MALFORMED[breakage](broken["requirements"][0])
    assert not load().validator(load().data_schema("requirements")).is_valid(broken)


def test_schema_accepts_dotted_hyphenated_check_ids(catalog: dict[str, Any]) -> None:
    checked = copy.deepcopy(catalog)
    checked["requirements"][0]["checks"] = ["capture.replay.duplicate-exact", "envelope.is-error"]
    assert load().validator(load().data_schema("requirements")).is_valid(checked)


def test_ids_are_unique(requirements: list[dict[str, Any]]) -> None:
    ids = [r["id"] for r in requirements]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


# -- the catalog against spec/contract.md ----------------------------------


def test_every_catalog_id_is_defined_in_contract_md(by_id: dict[str, Any], bullets: list[tuple[str, str, str]]) -> None:
    defined = {rid for rid, _, _ in bullets}
    assert sorted(rid for rid in set(by_id) - defined if not rid.startswith("EMC-HP-")) == []


def test_the_host_profile_and_the_catalog_agree(by_id: dict[str, Any]) -> None:
    """Every EMC-HP requirement of spec/host-wiring.md is catalogued once, at its level, as a profile requirement."""
    stated = PROFILE_PARAGRAPH.findall(load().text("spec", "host-wiring.md"))
    assert len(stated) == len({rid for rid, _ in stated})
    assert dict(stated) == {
        rid: entry["level"] for rid, entry in by_id.items() if rid.startswith("EMC-HP-")
    }
    assert {entry["source"] for rid, entry in by_id.items() if rid.startswith("EMC-HP-")} == {"pin", "wiring"}


# -- levels: contract (cited), wiring, profile --------------------------------

CONTRACT_SOURCE = ROOT.parent / "shared" / "contract-source" / "engram-memory-mcp.es.txt"


def test_every_contract_requirement_cites_the_contract(requirements: list[dict[str, Any]]) -> None:
    uncited = [r["id"] for r in requirements if r["source"] == "contract" and not r.get("contract_ref")]
    assert uncited == []
    assert all(r["contract_ref"]["section"].startswith("§") for r in requirements if r["source"] == "contract")


def test_only_host_profile_ids_are_wiring(requirements: list[dict[str, Any]]) -> None:
    assert sorted(r["id"] for r in requirements if r["source"] == "wiring" and not r["id"].startswith("EMC-HP-")) == []


def test_split_pins_name_a_contract_parent(by_id: dict[str, Any]) -> None:
    wrong = [(rid, e["split_from"]) for rid, e in by_id.items() if "split_from" in e
             and (e["source"] != "pin" or by_id.get(e["split_from"], {}).get("source") != "contract")]
    assert wrong == []


def test_split_pins_are_exercised_by_their_parents_checks(by_id: dict[str, Any]) -> None:
    missing = [rid for rid, e in by_id.items() if "split_from" in e
               and not set(by_id[e["split_from"]]["checks"]) <= set(e["checks"])]
    assert missing == []


@pytest.mark.skipif(not CONTRACT_SOURCE.exists(), reason="the contract source text is not beside this checkout")
def test_every_citation_is_found_in_the_contract_source(requirements: list[dict[str, Any]]) -> None:
    source = " ".join(CONTRACT_SOURCE.read_text(encoding="utf-8").split())
    missing = [
        r["id"]
        for r in requirements
        if r.get("contract_ref") and " ".join(r["contract_ref"]["quote"].split()) not in source
    ]
    assert missing == []


def test_schema_requires_a_citation_of_contract_entries(catalog: dict[str, Any]) -> None:
    broken = copy.deepcopy(catalog)
    entry = next(r for r in broken["requirements"] if r["source"] == "contract")
    del entry["contract_ref"]
    assert not load().validator(load().data_schema("requirements")).is_valid(broken)
    wired = copy.deepcopy(catalog)
    next(r for r in wired["requirements"] if not r["id"].startswith("EMC-HP-"))["source"] = "wiring"
    assert not load().validator(load().data_schema("requirements")).is_valid(wired)


def test_every_id_in_contract_md_is_catalogued(by_id: dict[str, Any], contract_md: str) -> None:
    mentioned = {rid for rid in ANY_ID.findall(contract_md) if not rid.startswith("EMC-HP-")}
    assert sorted(mentioned - set(by_id)) == []


def test_each_requirement_is_defined_once(bullets: list[tuple[str, str, str]]) -> None:
    ids = [rid for rid, _, _ in bullets]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


def test_levels_agree(by_id: dict[str, Any], bullets: list[tuple[str, str, str]]) -> None:
    mismatched = [(rid, level, by_id[rid]["level"]) for rid, level, _ in bullets if by_id[rid]["level"] != level]
    assert mismatched == []


def test_unverified_marker_matches_status(by_id: dict[str, Any], bullets: list[tuple[str, str, str]]) -> None:
    wrong = [
        rid for rid, _, text in bullets if ("Unverified" in markers(text)) != (by_id[rid]["status"] == "unverified")
    ]
    assert wrong == []


def test_pin_marker_matches_source(by_id: dict[str, Any], bullets: list[tuple[str, str, str]]) -> None:
    wrong = [rid for rid, _, text in bullets if ("Pin" in markers(text)) != (by_id[rid]["source"] == "pin")]
    assert wrong == []


def test_agent_guidance_and_host_duties_are_excluded(
    by_id: dict[str, Any], bullets: list[tuple[str, str, str]]
) -> None:
    unscoped = {"Agent guidance", "Host duty"}
    wrong = [rid for rid, _, text in bullets if markers(text) & unscoped and by_id[rid]["observable"]]
    assert wrong == []


def test_limit_ids_named_in_contract_md_exist(contract_md: str) -> None:
    assert sorted(set(LIMIT_LIKE.findall(contract_md)) - set(load().limits)) == []


# -- the catalog against the contract data ---------------------------------


def test_referenced_rules_exist(requirements: list[dict[str, Any]]) -> None:
    unknown = {(r["id"], rule) for r in requirements for rule in r.get("rules", ()) if rule not in load().rules}
    assert sorted(unknown) == []


def test_referenced_limits_exist(requirements: list[dict[str, Any]]) -> None:
    unknown = {(r["id"], limit) for r in requirements for limit in r.get("limits", ()) if limit not in load().limits}
    assert sorted(unknown) == []


def test_referenced_errors_exist(requirements: list[dict[str, Any]]) -> None:
    known = set(load().errors) | set(load().protocol_errors)
    unknown = {(r["id"], code) for r in requirements for code in r.get("errors", ()) if code not in known}
    assert sorted(unknown) == []


def test_every_rule_is_referenced(requirements: list[dict[str, Any]]) -> None:
    referenced = {rule for r in requirements for rule in r.get("rules", ())}
    assert sorted(set(load().rules) - referenced) == []


def test_tools_are_real(requirements: list[dict[str, Any]]) -> None:
    known = set(load().tools) | {"*"}
    unknown = {(r["id"], tool) for r in requirements for tool in r["tools"] if tool not in known}
    assert sorted(unknown) == []


@pytest.mark.parametrize("point", sorted(UNVERIFIED_POINTS))
def test_points_the_contract_leaves_unverified_are_catalogued(requirements: list[dict[str, Any]], point: str) -> None:
    section, word = UNVERIFIED_POINTS[point]
    assert any(
        r["status"] == "unverified" and r["section"].startswith(section) and word in r["summary"] for r in requirements
    ), point


# -- tools/traceability.py -------------------------------------------------


def test_every_must_is_checked_or_excluded(traceability: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """The traceability matrix passes: no established MUST is left without a check or a written exclusion."""
    assert traceability.main([]) == 0, capsys.readouterr().out[-2000:]


def _one(
    level: str = "MUST", status: str = "established", checks: tuple[str, ...] = (), exclusion: str | None = None
) -> dict[str, Any]:
    entry = {
        "id": "EMC-TEST-001",
        "level": level,
        "section": "§0",
        "summary": "A synthetic requirement.",
        "tools": ["*"],
        "eras": ["legacy", "modern"],
        "status": status,
        "source": "contract",
        "contract_ref": {"section": "§0", "quote": "synthetic"},
        "observable": exclusion is None,
        "checks": list(checks),
        "exclusion": exclusion,
    }
    return {"contract": "1.0.0", "requirements": [entry]}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (_one(), 1),
        (_one(level="MUST NOT"), 1),
        (_one(exclusion="not on the wire"), 0),
        (_one(checks=("envelope.shape",)), 0),
        (_one(status="unverified"), 0),
        (_one(level="SHOULD"), 0),
    ],
    ids=["uncovered-must", "uncovered-must-not", "excluded", "tested", "unverified", "should"],
)
def test_traceability_exit_status(
    traceability: ModuleType, case: dict[str, Any], expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert traceability.main([], catalog=case) == expected
    assert "EMC-TEST-001" in capsys.readouterr().out


def test_pin_drift_is_reported(traceability: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pin = tmp_path / "pin.txt"
    pin.write_text("# stale\nEMC-GONE-001\n", encoding="utf-8")
    assert traceability.main(["--pin", str(pin)], catalog=_one()) == 1
    out = capsys.readouterr().out
    assert "added (uncovered, not pinned): EMC-TEST-001" in out
    assert "removed (pinned, no longer uncovered): EMC-GONE-001" in out


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_every_format_renders_the_whole_catalog(
    traceability: ModuleType, fmt: str, by_id: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    status = traceability.main(["--format", fmt])
    out = capsys.readouterr().out
    uncovered = traceability.uncovered_musts(traceability.rows_of(load().requirements))
    assert status == (1 if uncovered else 0)
    assert set(ANY_ID.findall(out)) >= set(by_id)
    if fmt == "json":
        assert json.loads(out)["summary"]["uncovered_musts"] == uncovered


def test_traceability_reads_the_catalog_through_the_loader() -> None:
    source = (ROOT / "tools" / "traceability.py").read_text(encoding="utf-8")
    assert "requirements.json" not in source
    assert "engram_mcp.contract import load" in source
