"""The server's item-count pre-check (reference/_precheck.py) gives the oracle's own verdict, only sooner.

Wherever it refuses, the oracle (contract/validation.py) finds the arguments invalid with the same code: on
every argument fixture, on arrays generated around and far past each bound, and on generated mutations of
the fixtures. And a capture citing 100,000 ids is refused without the oracle's per-item pass.
"""

from __future__ import annotations

import copy
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_mcp.contract import ArgumentOracle, load
from engram_mcp.reference._config import load_config
from engram_mcp.reference._envelope import Outcome
from engram_mcp.reference._precheck import ItemCounts, _bounds, _reached
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference.server import CallContext
from tests.reference.conftest import ReferenceDir, capture_args, stdio_client_for
from tests.test_compiled_validators import _mutated

ROOT = Path(__file__).parents[2]
CONTRACT = load()
ORACLE = ArgumentOracle()
COUNTS = ItemCounts(CONTRACT)
CASES = [(document["tool"], case["arguments"])
         for path in sorted((ROOT / "fixtures" / "arguments").glob("*.json"))
         for document in [json.loads(path.read_text(encoding="utf-8"))] for case in document["cases"]]
BOUNDED = [(tool, path, bound) for tool in CONTRACT.tools
           for path, bound in _bounds(CONTRACT.advertised_input_schema(tool))]


def assert_agrees(tool: str, arguments: Any) -> bool:
    """Where the pre-check refuses, the oracle does too, with the same code; whether it refused."""
    if not COUNTS.over(tool, arguments):
        return False
    verdict = ORACLE.verdict(tool, arguments)
    assert not verdict.valid and verdict.code == COUNTS.code, (tool, verdict)
    return True


def test_the_code_is_the_one_the_oracle_answers_for_too_many_items() -> None:
    assert COUNTS.code is not None and COUNTS.code == CONTRACT.code_precedence[0]
    assert BOUNDED, "the input schemas bound no array"


@pytest.mark.parametrize(("tool", "arguments"), CASES)
def test_on_every_fixture_the_pre_check_agrees_with_the_oracle(tool: str, arguments: Any) -> None:
    assert_agrees(tool, arguments)


def with_length(arguments: dict[str, Any], path: tuple[Any, ...], length: int) -> dict[str, Any]:
    """A copy whose first array at ``path`` holds ``length`` items (copies of its first, or strings)."""
    changed = copy.deepcopy(arguments)
    found = next(iter(_reached(changed, path)), None)
    if isinstance(found, list):
        filler = found[0] if found else "item"
        found[:] = [copy.deepcopy(filler) if not isinstance(filler, str) else f"{filler}-{i}" for i in range(length)]
    return changed


@pytest.mark.parametrize(("tool", "path", "bound"), BOUNDED, ids=[f"{t}:{len(p)}" for t, p, _ in BOUNDED])
@pytest.mark.parametrize("excess", [-1, 0, 1, 400])
def test_around_and_far_past_each_bound_the_pre_check_agrees(tool: str, path: Any, bound: int, excess: int) -> None:
    bases = [arguments for case_tool, arguments in CASES if case_tool == tool and next(_reached(arguments, path), None)]
    assert bases, f"no fixture reaches the array at {path}"
    for base in bases[:2]:
        refused = assert_agrees(tool, with_length(base, path, bound + excess))
        assert refused == (excess > 0)


# The compiled-validator tests' mutations of the fixtures (any value replaced, deleted or added), and then,
# now and again, an array the schema bounds resized around or past its bound.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=_mutated(), data=st.data())
def test_on_generated_mutations_the_pre_check_agrees(mutated: tuple[str, Any], data: st.DataObject) -> None:
    tool, arguments = mutated
    bounded = [(path, bound) for t, path, bound in BOUNDED if t == tool]
    grow: bool = data.draw(st.booleans())
    if bounded and grow:
        path, bound = data.draw(st.sampled_from(bounded))
        arguments = with_length(arguments, path, bound + data.draw(st.integers(-2, 300)))
    assert_agrees(tool, arguments)


def hundred_thousand_ids() -> dict[str, Any]:
    arguments = capture_args()
    arguments["evidence"]["citation_ids"] = [f"c{i:06d}" for i in range(100_000)]
    return arguments


def test_a_capture_citing_a_hundred_thousand_ids_is_refused_without_the_per_item_pass(
    reference_dir: ReferenceDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    arguments = hundred_thousand_ids()
    server = ReferenceServer(load_config(reference_dir.config))
    try:
        def per_item_pass(*_: Any, **__: Any) -> Any:
            raise AssertionError("the oracle's per-item pass ran")

        monkeypatch.setattr(server.oracle, "verdict", per_item_pass)
        call = CallContext("engram_memory_capture", reference_dir.host.binding(), "audit_" + "0" * 32, arguments,
                           datetime.now(UTC), server.audit, server.deadlines)
        refused = server.admitted(call)
    finally:
        server.close()
    assert isinstance(refused, Outcome) and refused.code == COUNTS.code


@pytest.mark.anyio
async def test_over_stdio_the_capture_is_refused_with_the_oracles_code(
    reference_dir: ReferenceDir, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = hundred_thousand_ids()
    async with stdio_client_for(reference_dir, "legacy") as client:
        started = time.monotonic()
        result = await client.call("engram_memory_capture", arguments)
        seconds = time.monotonic() - started
    assert result.code == COUNTS.code
    with capsys.disabled():
        print(f"\na capture citing 100,000 ids (1 MB): refused {result.code} in {seconds:.2f} s over stdio")
