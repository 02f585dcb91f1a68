"""The mutation families, registered by name as their modules are imported.

A family is a function ``(tool, *, purpose, now) -> list[Case]`` built from a
valid base alone (no seed, no corpus). The order of registration is the order
families are listed and run; ``families/__init__.py`` fixes it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from .case import Case


class Generator(Protocol):
    def __call__(self, tool: str, *, purpose: str = ..., now: datetime | None = None) -> list[Case]: ...


FAMILIES: dict[str, Generator] = {}


def family(name: str) -> Callable[[Generator], Generator]:
    """Register a generator under a family name (each name once)."""

    def register(generator: Generator) -> Generator:
        if name in FAMILIES:
            raise ValueError(f"family {name} is registered twice")
        FAMILIES[name] = generator
        return generator

    return register
