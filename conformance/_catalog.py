"""The suite's checks as data: id -> requirement ids, read from the check markers, with what each needs to run.

``spec/checks.json`` is this catalog written down (``tools/sync_checks.py``), so that the command line can
refuse a mistyped id, or list the checks of one tool, without importing the suite.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from engram_mcp.conformance import suite
from engram_mcp.conformance._needs import TOOLS, Needs, tool_name


def _case_tools(function: Any) -> tuple[str, ...]:
    """The tools a check's ``tool`` parameter takes, in its parametrize order (every tool when it has none)."""
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize" and mark.args and "tool" in str(mark.args[0]).replace(" ", "").split(","):
            names = [n.strip() for n in str(mark.args[0]).split(",")]
            position = names.index("tool")
            values = [value[position] if len(names) > 1 else value for value in mark.args[1]]
            return tuple(t for t in (tool_name(v) for v in values) if t is not None)
    return TOOLS


class SuiteChecks(Mapping[str, tuple[str, ...]]):
    def __init__(self) -> None:
        self._requirements: dict[str, tuple[str, ...]] = {}
        self._docs: dict[str, str] = {}
        self._needs: dict[str, Needs] = {}
        self._case_tools: dict[str, tuple[str, ...]] = {}
        self._modules: dict[str, str] = {}
        for info in pkgutil.iter_modules(suite.__path__):
            if not info.name.startswith("test_"):
                continue
            module = importlib.import_module(f"{suite.__name__}.{info.name}")
            for _, function in inspect.getmembers(module, inspect.isfunction):
                for mark in getattr(function, "pytestmark", []):
                    if mark.name == "engram_check":
                        check_id, requirements, needs = mark.args
                        if check_id in self._requirements:
                            raise ValueError(f"check id {check_id} is used twice")
                        self._requirements[check_id] = tuple(requirements)
                        self._docs[check_id] = (inspect.getdoc(function) or "").split("\n")[0]
                        self._needs[check_id] = needs
                        self._case_tools[check_id] = _case_tools(function)
                        self._modules[check_id] = info.name + ".py"

    def __getitem__(self, check_id: str) -> tuple[str, ...]:
        return self._requirements[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._requirements))

    def __len__(self) -> int:
        return len(self._requirements)

    def doc(self, check_id: str) -> str:
        return self._docs.get(check_id, "")

    def needs(self, check_id: str) -> Needs:
        return self._needs[check_id]

    def tools(self, check_id: str) -> frozenset[str]:
        """Every tool some case of the check may call."""
        return self._needs[check_id].every_tool(self._case_tools[check_id])

    def as_data(self) -> dict[str, Any]:
        """spec/checks.json: every check, its requirements, what it asks of the target, and what it needs."""
        return {"checks": [{"id": check_id, "family": check_id.split(".", 1)[0], "module": self._modules[check_id],
                            "asks": self._docs[check_id],
                            "requirements": list(self._requirements[check_id]),
                            "tools": sorted(self.tools(check_id), key=TOOLS.index),
                            **self._needs[check_id].as_data()} for check_id in self]}


@cache
def suite_checks() -> SuiteChecks:
    return SuiteChecks()
