"""Every family by name: the mutations from the registry, the corpus and the drawn ones."""

from __future__ import annotations

from datetime import datetime

from . import families as _registered  # noqa: F401 - importing it registers the mutation families
from .bases import DEFAULT_PURPOSE
from .case import Case
from .families.fixtures import fixture_cases
from .families.schemathesis import schemathesis_cases
from .registry import FAMILIES

ALL_FAMILIES = ("fixtures", "schemathesis-positive", "schemathesis-negative", *FAMILIES)


def cases(family: str, tool: str, *, seed: int = 0, examples: int = 25, purpose: str = DEFAULT_PURPOSE,
          now: datetime | None = None) -> list[Case]:
    """The cases of one family for one tool."""
    if family == "fixtures":
        return fixture_cases(tool)
    if family.startswith("schemathesis-"):
        return schemathesis_cases(tool, family.removeprefix("schemathesis-"), seed=seed, examples=examples,
                                  purpose=purpose, now=now)
    return FAMILIES[family](tool, purpose=purpose, now=now)
