"""The mutation families, registered by name as their modules are imported.

A family is a function ``(tool, *, purpose, now) -> list[Case]`` built from a
valid base alone (no seed, no corpus). The order of registration is the order
families are listed and run; ``families/__init__.py`` fixes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, cast

from .case import Case


class Generator(Protocol):
    def __call__(self, tool: str, *, purpose: str = ..., now: datetime | None = None) -> list[Case]: ...


FAMILIES: dict[str, Generator] = {}


def family(name: str, *, tools: tuple[str, ...] | None = None) -> Callable[[Generator], Generator]:
    """Register a generator under a family name (each name once). With ``tools``, the family
    applies to those tools alone: any other tool gets no cases, and the generator never sees it."""

    def register(generator: Generator) -> Generator:
        if name in FAMILIES:
            raise ValueError(f"family {name} is registered twice")
        chosen = generator if tools is None else _only(generator, tools)
        FAMILIES[name] = chosen
        return chosen

    return register


def _only(generator: Generator, tools: tuple[str, ...]) -> Generator:
    @functools.wraps(generator)
    def applicable(tool: str, **options: Any) -> list[Case]:
        return generator(tool, **options) if tool in tools else []

    return cast(Generator, applicable)
