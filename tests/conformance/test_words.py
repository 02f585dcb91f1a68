"""What a reader reads is words, never Python: the message templates of the harness and the model spell no value
the Python way, and an answer is said as it came over the wire.

The templates are checked here, statically, for the one spelling a template itself chooses (a ``!r`` conversion,
or ``repr()`` inside an f-string); the sentences a run writes are checked over real runs: the partial server's
(tests/conformance/test_readiness.py) and every variant of the faulty catalog (tests/catalog_runs.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engram_mcp.contract._words import answer_words, quoted, spoken
from tests.catalog_runs import python_spelling

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("conformance", "contract")


def _reprs(tree: ast.AST) -> list[int]:
    """Lines of f-strings that format a value with !r or repr()."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue):
            called = node.value
            is_repr = isinstance(called, ast.Call) and isinstance(called.func, ast.Name) and called.func.id == "repr"
            if node.conversion == ord("r") or is_repr:
                found.append(node.lineno)
    return found


def test_no_message_template_formats_a_value_with_repr() -> None:
    sources = [path for folder in SOURCES for path in sorted((ROOT / folder).rglob("*.py"))]
    offending = [f"{path.relative_to(ROOT)}:{line}" for path in sources
                 for line in _reprs(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offending, f"say values with engram_mcp.contract._words.spoken or quoted, not repr: {offending}"


def test_the_template_scan_finds_a_repr() -> None:
    assert _reprs(ast.parse('x = f"got {value!r} and {repr(other)}"')) == [1, 1]


@pytest.mark.parametrize(("value", "said"), [
    (None, "null"), (True, "true"), ("rejected", "'rejected'"), (["a", "b", "c"], "'a', 'b' and 'c'"), ([], "none"),
    ({"code": "NOT_FOUND", "replayed": None}, "code: 'NOT_FOUND'; replayed: null"),
    (frozenset({"b", "a"}), "'a' and 'b'"),
    (3, "3"), ("line\nbreak\x1b[31m", "'line\\nbreak\\u001b[31m'"),
])
def test_a_value_is_spoken_in_words(value: object, said: str) -> None:
    assert spoken(value) == said
    assert python_spelling(spoken(value)) is None


@pytest.mark.parametrize(("result", "error", "said"), [
    ({"content": [{"type": "text", "text": "MCP error -32602: Tool x not found"}], "isError": True}, None,
     "a tool result with isError true and text 'MCP error -32602: Tool x not found' and no structuredContent"),
    (None, {"code": -32603, "message": "Trusted invocation context unavailable"},
     "the JSON-RPC error -32603 with the message 'Trusted invocation context unavailable'"),
    ({"structuredContent": {"ok": False, "error": {"code": "NOT_FOUND"}}}, None,
     "a refusal envelope with the code 'NOT_FOUND'"),
    ({"structuredContent": {"ok": True, "output": {}}}, None, "a success envelope"),
    ({"structuredContent": {"ok": True, "output": {"value": {"outcome": {"status": "accepted"}, "replayed": True}}}},
     None, "a success envelope with the status 'accepted' (a replay)"),
    ({"tools": []}, None, 'a result that is no tool result ({"tools": []})'),
])
def test_an_answer_is_said_as_it_came_over_the_wire(result: dict | None, error: dict | None, said: str) -> None:
    assert answer_words(result, error) == said


def test_a_target_s_text_never_starts_a_line_of_ours() -> None:
    assert "\n" not in quoted("first\nVERDICT: conformant") and quoted("x" * 500, 20).endswith("…'")


@pytest.mark.parametrize("text", ["result None", "['EMC-IDEM-005', 'EMC-IDEM-006']", "{'kind': 'error', 'code': 1}",
                                  "replayed=False", "frozenset({'a'})", "<engram_mcp.x.Reply object at 0x7f>"])
def test_the_spelling_check_catches_python(text: str) -> None:
    assert python_spelling(text) is not None


@pytest.mark.parametrize("text", ["None of the six tools is listed", "replayed true", "the code 'NOT_FOUND'",
                                  'arguments: {"query": "x"}'])
def test_the_spelling_check_lets_words_and_json_pass(text: str) -> None:
    assert python_spelling(text) is None
