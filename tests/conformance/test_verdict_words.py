"""Every verdict is a sentence about the target: no pytest assertion introspection reaches a report."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engram_mcp.conformance import suite
from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._status import UNMET, failure_detail, outcome_status

SUITE = Path(suite.__file__).resolve().parent
ARTEFACTS = ("assert ", "Use -v to get more diff", "use -vv", "Full diff:", "where ")


def test_every_assert_in_the_suite_carries_its_message() -> None:
    bare = [f"{path.name}:{node.lineno}" for path in sorted(SUITE.glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Assert) and node.msg is None]
    assert bare == [], f"asserts without a message, whose verdict would be pytest's introspection: {bare}"


def _rewritten(message: str | None) -> AssertionError:
    """An AssertionError as pytest's assertion rewriting makes it (this module is rewritten as a test module)."""
    kind, expected = "result", ("result", list[str]())
    try:
        if message is None:
            assert (kind, ["a tool"]) == expected  # the bare assert under test
        else:
            assert (kind, ["a tool"]) == expected, message
    except AssertionError as error:
        if "Use -v to get more diff" not in str(error):
            pytest.skip("assertion rewriting is off here: pytest wrote no introspection to clean")
        return error
    raise AssertionError("the comparison held")


def test_a_bare_asserts_introspection_becomes_what_the_check_asks() -> None:
    error = _rewritten(None)
    assert str(error).startswith("assert (")
    status, message = outcome_status(error, ("EMC-HP-013",), "tools/list with no binding key lists no tools.")
    assert (status, message) == (Status.FAIL, "not met: tools/list with no binding key lists no tools.")
    assert outcome_status(error, ("EMC-HP-013",)) == (Status.FAIL, UNMET)
    assert failure_detail(error) == ""


def test_a_message_is_kept_and_pytests_explanation_after_it_dropped() -> None:
    error = _rewritten("tools/list answered a result with one tool, not an empty tool list\n  scope=primary")
    message = outcome_status(error, ("EMC-HP-013",), "unused")[1]
    assert message == "tools/list answered a result with one tool, not an empty tool list"
    assert failure_detail(error) == "    scope=primary"  # pytest indents a message's later lines
    for shown in (message, failure_detail(error)):
        assert not any(artefact in shown for artefact in ARTEFACTS), shown


def test_pytests_diff_hints_never_pass_for_evidence() -> None:
    error = AssertionError("the lists differ\n  Use -v to get more diff\n  offending: x\n  Full diff:")
    assert failure_detail(error) == "  offending: x"


def test_a_long_verdict_and_its_detail_lines_are_cut_between_words() -> None:
    from engram_mcp.conformance._status import MESSAGE_LIMIT

    sentence = "the target answered " + " ".join(f"record{n:04d}" for n in range(120))
    status, message = outcome_status(AssertionError(sentence + "\n" + sentence), ("EMC-GET-001",))
    assert status is Status.FAIL and message.endswith("…") and len(message) <= MESSAGE_LIMIT
    assert message[:-1].split()[-1] in sentence.split(), f"cut inside a word: {message[-30:]!r}"
    detail = failure_detail(AssertionError("verdict\n" + sentence))
    assert detail.endswith("…") and detail[:-1].split()[-1] in sentence.split(), detail[-30:]
