"""Item counts judged before the full argument check, in the server's edge, with the oracle's own verdict.

The argument oracle (contract/validation.py) lists every violation of a call,
which the conformance harness reads; for an array far over its ``maxItems``
that is one schema error and one rule check per item (a capture citing 100,000
ids took seconds to refuse). The server reads only whether the arguments are
valid and the code to answer, and an array over its ``maxItems`` fixes both:
``maxItems`` applies wherever the schema reaches the array through
``properties`` and ``items`` (the input schemas use no conditional keywords),
so the verdict is invalid, and the code the oracle gives is the code of the
rule owning ``maxItems``, first in the contract's code precedence. So the
server answers that code at once; the oracle is left as it is, and
tests/reference/test_precheck.py checks that both agree on every fixture and
on generated arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engram_mcp.contract import Contract

_EVERY_ITEM = object()  # a path step: each element of an array
Path = tuple[Any, ...]


def _bounds(schema: Any, path: Path = ()) -> Iterator[tuple[Path, int]]:
    """Each array the schema bounds, as the path that reaches it and its maxItems."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("maxItems"), int):
        yield path, schema["maxItems"]
    for name, below in (schema.get("properties") or {}).items():
        yield from _bounds(below, (*path, name))
    yield from _bounds(schema.get("items"), (*path, _EVERY_ITEM))


def _reached(value: Any, path: Path) -> Iterator[Any]:
    """The values the path reaches in ``value`` (none where a step does not apply)."""
    if not path:
        yield value
        return
    step, rest = path[0], path[1:]
    if step is _EVERY_ITEM:
        if isinstance(value, list):
            for item in value:
                yield from _reached(item, rest)
    elif isinstance(value, dict) and step in value:
        yield from _reached(value[step], rest)


class ItemCounts:
    """The arrays each tool's input schema bounds, and the code an array over its bound is refused with."""

    def __init__(self, contract: Contract) -> None:
        self._bounds = {tool: list(_bounds(contract.advertised_input_schema(tool))) for tool in contract.tools}
        owners = [rule for rule in contract.rules.values()
                  if rule.mechanism in ("schema", "keyword") and rule.schema is None and "maxItems" in rule.keywords]
        code = owners[0].code if len(owners) == 1 else None
        # Only while that code wins over every other the oracle could add is the answer the oracle's.
        self.code = code if contract.code_precedence[:1] == (code,) else None

    def over(self, tool: str, arguments: Any) -> bool:
        """Whether an array in ``arguments`` holds more items than the tool's schema allows there."""
        if self.code is None:
            return False
        return any(
            isinstance(found, list) and len(found) > bound
            for path, bound in self._bounds.get(tool, ())
            for found in _reached(arguments, path)
        )
