"""The suite's checks as data: id -> requirement ids, read from the check markers."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator, Mapping
from functools import cache

from engram_mcp.conformance import suite


class SuiteChecks(Mapping[str, tuple[str, ...]]):
    def __init__(self) -> None:
        self._requirements: dict[str, tuple[str, ...]] = {}
        self._docs: dict[str, str] = {}
        for info in pkgutil.iter_modules(suite.__path__):
            if not info.name.startswith("test_"):
                continue
            module = importlib.import_module(f"{suite.__name__}.{info.name}")
            for _, function in inspect.getmembers(module, inspect.isfunction):
                for mark in getattr(function, "pytestmark", []):
                    if mark.name == "engram_check":
                        check_id, requirements = mark.args
                        if check_id in self._requirements:
                            raise ValueError(f"check id {check_id} is used twice")
                        self._requirements[check_id] = tuple(requirements)
                        self._docs[check_id] = (inspect.getdoc(function) or "").split("\n")[0]

    def __getitem__(self, check_id: str) -> tuple[str, ...]:
        return self._requirements[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._requirements))

    def __len__(self) -> int:
        return len(self._requirements)

    def doc(self, check_id: str) -> str:
        return self._docs.get(check_id, "")


@cache
def suite_checks() -> SuiteChecks:
    return SuiteChecks()
