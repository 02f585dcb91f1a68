"""The contract's data files validate, agree with each other, and are read by the loader alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engram_mcp.contract import load

CONTRACT = load()
ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("contract", "reference", "conformance", "tools")
LOADER = ROOT / "contract" / "_loader.py"
# The fixture generator writes fixtures/ and states boundary values as data on
# purpose: the corpus must check the schemas and limits, not echo them.
GENERATOR = ROOT / "tools" / "make_fixtures.py"
# Tools that write a data file (never read it but through the loader).
WRITERS = {GENERATOR: ("fixtures/", "fixtures"), ROOT / "tools" / "sync_checks.py": ("spec/", "spec")}


@pytest.mark.parametrize("name", ["errors", "limits", "rules", "tools"])
def test_data_file_validates_against_its_schema(name: str) -> None:
    CONTRACT.validator(CONTRACT.data_schema(name)).validate(CONTRACT.document("spec", f"{name}.json"))


def test_error_table_has_the_31_contract_codes_once_each() -> None:
    codes = [e["code"] for e in CONTRACT.document("spec", "errors.json")["tool_errors"]]
    assert len(codes) == len(set(codes)) == 31
    assert "gate_failed" in codes  # the one lowercase code: the host gate's, kept verbatim


def test_every_error_code_is_named_in_the_restated_contract() -> None:
    text = CONTRACT.text("spec", "contract.md")
    assert [code for code in CONTRACT.errors if code not in text] == []


def test_every_action_class_is_described_and_used() -> None:
    used = {e.action for e in CONTRACT.errors.values()}
    assert used == set(CONTRACT.error_actions)


def test_retriable_follows_the_action_class() -> None:
    # Only "retry" actions may be retriable; every code in them must be.
    for error in CONTRACT.errors.values():
        assert error.retriable == (error.action in ("retry_with_backoff", "outcome_unknown")), error.code


def test_error_tools_are_real_tools() -> None:
    for error in CONTRACT.errors.values():
        assert set(error.tools) <= set(CONTRACT.tools), error.code


def test_messages_are_constant_distinct_and_sanitized() -> None:
    messages = [e.message for e in CONTRACT.errors.values()]
    assert len(set(messages)) == len(messages)
    for message in messages:
        assert "{" not in message and "%" not in message  # no template to fill with input


def test_protocol_errors_are_the_two_jsonrpc_errors() -> None:
    codes = {e.jsonrpc_code: e.message for e in CONTRACT.protocol_errors.values()}
    assert codes == {-32602: "Unknown tool", -32603: "Trusted invocation context unavailable"}


def test_every_tool_has_input_and_value_schemas() -> None:
    for tool in CONTRACT.tools:
        assert CONTRACT.input_schema(tool)["title"].startswith(tool)
        assert CONTRACT.value_schema(tool)["title"].startswith(tool)
    tool_files = {p.split("/")[1].split(".")[0] for p in CONTRACT.schema_files if p.startswith("tools/")}
    assert tool_files == set(CONTRACT.tools)


def test_rules_name_real_tools_limits_and_schemas() -> None:
    for rule in CONTRACT.rules.values():
        if rule.tools != "*":
            assert set(rule.tools) <= set(CONTRACT.tools), rule.id
        if rule.limit:
            assert rule.limit in CONTRACT.limits, rule.id
        if rule.schema:
            assert isinstance(CONTRACT.resolve(rule.schema), dict), rule.id
        assert rule.code in CONTRACT.errors, rule.id


def test_contract_digest_is_stable_and_content_addressed() -> None:
    assert CONTRACT.digest == type(CONTRACT)().digest
    assert CONTRACT.digest.startswith("sha256:") and len(CONTRACT.digest) == 71


# -- the loader is the only reader of the data files -----------------------


def python_sources() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


def _reads_data(tree: ast.AST, writes: tuple[str, ...] = ()) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if (
                    isinstance(side, ast.Constant)
                    and side.value in ("schemas", "spec", "fixtures")
                    and side.value not in writes
                ):
                    found.append(f"line {node.lineno}: path into {side.value}/")
        if isinstance(node, ast.Attribute) and node.attr == "files":
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("resources", "importlib_resources"):
                found.append(f"line {node.lineno}: importlib.resources.files")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            data_dirs = tuple(d for d in ("schemas/", "spec/", "fixtures/") if d not in writes)
            if node.value.startswith(data_dirs) and node.value.endswith(".json"):
                found.append(f"line {node.lineno}: data path {node.value!r}")
    return found


@pytest.mark.parametrize("path", python_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_loader_reads_data_files(path: Path) -> None:
    if path == LOADER:
        return
    writes = WRITERS.get(path, ())
    assert _reads_data(ast.parse(path.read_text(encoding="utf-8")), writes) == []


def test_the_data_reader_check_can_fail() -> None:
    tree = ast.parse('from importlib import resources\nresources.files("x")\nopen("spec/errors.json")\nROOT / "spec"')
    assert len(_reads_data(tree)) == 3


def _typed_again(tree: ast.AST) -> list[str]:
    messages = {e.message for e in CONTRACT.errors.values()} | {e.message for e in CONTRACT.protocol_errors.values()}
    distinctive = {limit.value for limit in CONTRACT.limits.values() if abs(limit.value) >= 1000}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and node.value in messages:
                found.append(f"line {node.lineno}: message {node.value!r}")
            if isinstance(node.value, int) and not isinstance(node.value, bool) and node.value in distinctive:
                found.append(f"line {node.lineno}: limit value {node.value}")
    return found


@pytest.mark.parametrize("path", python_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_message_or_limit_is_typed_again_in_python(path: Path) -> None:
    if path == GENERATOR:
        return
    assert _typed_again(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_typed_again_check_can_fail() -> None:
    tree = ast.parse('MAX = 1048576\nMSG = "Unknown tool"')
    assert len(_typed_again(tree)) == 2
