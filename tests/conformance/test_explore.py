"""Exploration's parts without a target: programs drawn from a seed, steps dropped with what needs them,
counterexample files read back, and the diff's classes of answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_mcp.conformance._cli import main
from engram_mcp.conformance._cli_explore import compare
from engram_mcp.conformance._explore import CallerRole, CounterexampleError, Program, Step, draw, read_counterexample
from engram_mcp.conformance._explore._execute import _fill, _Unresolved
from engram_mcp.conformance._explore._program import ADMIT, CAPTURE, FORGET, SEARCH, TOOLS, ref
from engram_mcp.contract import load

FULL = frozenset(TOOLS)
ROLES = [CallerRole(0, "a", FULL), CallerRole(0, "b", FULL), CallerRole(1, "a", FULL),
         CallerRole(0, "limited", frozenset({SEARCH, CAPTURE}))]


def test_the_same_seed_draws_the_same_program_and_another_seed_another() -> None:
    first, again = draw(7, ROLES, "purpose:p", 60), draw(7, ROLES, "purpose:p", 60)
    assert first == again
    assert draw(8, ROLES, "purpose:p", 60, opening=False) != draw(7, ROLES, "purpose:p", 60, opening=False)
    assert len(first.steps) == 60


def test_a_program_refers_only_to_earlier_steps_and_uses_every_tool() -> None:
    program = draw(3, ROLES, "purpose:p", 200)
    for n, step in enumerate(program.steps):
        assert all(r < n for r in step.refs()), f"step {n} refers to a later step"
        assert 0 <= step.caller < len(ROLES)
    assert {step.tool for step in program.steps} == set(TOOLS)


def test_the_opening_reaches_replay_conflict_another_principal_and_a_page_after_a_forget() -> None:
    notes = [step.note for step in draw(1, ROLES, "purpose:p", 21).steps]
    for wanted in ("replay of step 0", "step 0's key with other content", "step 0's key, another principal",
                   "replay of step 4", "continuation of step 8", "foreign get of step 4's", "get after forget",
                   "continuation of step 8 after forget", "step 11 again with another reason"):
        assert wanted in notes, wanted


def test_without_drops_what_needs_a_dropped_step_and_renumbers_the_rest() -> None:
    steps = (Step(CAPTURE, {"idempotency_key": "${k1}"}, 0),
             Step(ADMIT, {"candidate_id": ref(0, "candidate_id"), "idempotency_key": "${k2}"}, 0),
             Step(CAPTURE, {"idempotency_key": "${k3}"}, 0),
             Step(ADMIT, {"candidate_id": ref(2, "candidate_id"), "idempotency_key": "${k4}"}, 0),
             Step(FORGET, {"record_id": ref(3, "record_id"), "idempotency_key": "${k5}"}, 0))
    shorter = Program(0, steps).without([0])
    assert [s.tool for s in shorter.steps] == [CAPTURE, ADMIT, FORGET]  # step 1 needed step 0
    assert shorter.steps[1].arguments["candidate_id"] == ref(0, "candidate_id")
    assert shorter.steps[2].arguments["record_id"] == ref(1, "record_id")


def test_keys_and_words_are_fresh_per_execution_and_answers_fill_references() -> None:
    arguments = {"idempotency_key": "${k2}", "query": "about ${w1}", "candidate_id": ref(0, "candidate_id")}
    one = _fill(arguments, "xaa", {0: {"candidate_id": "candidate_given"}})
    other = _fill(arguments, "xbb", {0: {"candidate_id": "candidate_given"}})
    assert one["candidate_id"] == "candidate_given"
    assert one["idempotency_key"] != other["idempotency_key"] and "${" not in one["query"]
    unknown = _fill({"record_id": ref(3, "record_id")}, "xaa", {})
    assert unknown["record_id"].startswith("mem_")  # a well-formed id nobody issued
    with pytest.raises(_Unresolved):
        _fill({"page_cursor": ref(3, "next_page_cursor")}, "xaa", {})


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_counterexample_file_is_read_back_and_a_bad_one_refused_with_the_reason(tmp_path: Path) -> None:
    header = {"kind": "counterexample", "contract": load().version, "era": "modern", "seed": 5, "broken": ["X"]}
    step = {"kind": "step", "n": 0, "tool": CAPTURE, "arguments": {"idempotency_key": "${k1}"}, "caller": 1}
    read = read_counterexample(_write(tmp_path / "ok.jsonl", [header, step]))
    assert read.era == "modern" and read.program.steps[0].caller == 1 and read.program.seed == 5
    cases = {"not-json": None, "no-header": [step], "other-contract": [{**header, "contract": "0.9.0"}, step],
             "no-step": [header], "bad-era": [{**header, "era": "future"}, step],
             "bad-step": [header, {"kind": "step", "n": 0}]}
    for name, lines in cases.items():
        path = tmp_path / f"{name}.jsonl"
        if lines is None:
            path.write_text("{not json\n", encoding="utf-8")
        else:
            _write(path, lines)
        with pytest.raises(CounterexampleError):
            read_counterexample(path)


def test_replay_of_a_file_that_is_no_counterexample_is_a_usage_error(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text('{"kind": "something else"}\n', encoding="utf-8")
    assert main(["replay", str(bogus), "--target", "reference"]) == 2
    assert "counterexample header" in capsys.readouterr().err


def _line(n: int, verdict: str, matched: list[str], pins: list[str] | None = None) -> dict[str, object]:
    return {"era": "legacy", "program": 0, "n": n, "tool": CAPTURE, "verdict": verdict, "matched": matched,
            "pins": pins or [], "seen": "ok"}


def test_diff_tells_a_divergence_from_a_choice_the_contract_leaves_open() -> None:
    def trace(*lines: dict[str, object]) -> dict[tuple[str, int, int], dict[str, object]]:
        return {("legacy", 0, int(str(line["n"]))): line for line in lines}

    same = trace(_line(0, "allowed", ["fresh"]), _line(1, "allowed", ["replay"]))
    assert compare(same, same)[0] is None
    free = trace(_line(0, "allowed", ["fresh"]), _line(1, "allowed", ["replay:duplicate_exact"]))
    divergence, compared, choices = compare(same, free)
    assert divergence is None and compared == 2 and choices == 1
    pinned = trace(_line(0, "allowed", ["fresh"]), _line(1, "allowed", ["replay:duplicate_exact"], ["EMC-HP-001"]))
    found = compare(same, pinned)[0]
    assert found is not None and found.key == ("legacy", 0, 1) and "pins" in found.why
    wrong = trace(_line(0, "not allowed", []), _line(1, "allowed", ["replay"]))
    found = compare(same, wrong)[0]
    assert found is not None and found.key == ("legacy", 0, 0) and "not" in found.why
    short = trace(_line(0, "allowed", ["fresh"]))
    found = compare(same, short)[0]
    assert found is not None and found.key == ("legacy", 0, 1)
