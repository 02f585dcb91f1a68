"""Schema-driven arguments drawn with schemathesis under a fixed seed.

The seed fixes the draws of one version of the code, not across versions:
besides its seeded random source, hypothesis (6.1xx) mixes in literal
constants gathered from every module of this project that is imported when it
draws (see hypothesis.internal.constants_ast). Adding or changing a short string
or a large number in such a module, this package included, changes which
cases a seed gives; docstrings, comments and f-strings do not count. So a run
and its reproduction agree when they run the same code, and a change to the
fuzzer that must keep the drawn cases keeps that set of literals whole.
"""

from __future__ import annotations

import copy
import functools
import json
from datetime import datetime
from typing import Any

from .. import kept_draws
from ..bases import DEFAULT_PURPOSE
from ..case import Case, judged, utc_now
from ..repair import bind_purpose, repair
from ..schema import CONTRACT
from ..vocabulary import TOOLS


@functools.cache
def _openapi() -> Any:
    """Each tool's advertised input schema as the JSON body of a synthetic OpenAPI 3.1 operation."""
    import schemathesis

    document = {
        "openapi": "3.1.0",
        "info": {"title": "engram memory tools", "version": CONTRACT.version},
        "paths": {
            f"/tools/{tool}": {"post": {
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": CONTRACT.advertised_input_schema(tool)}}},
                "responses": {"200": {"description": "an envelope"}},
            }}
            for tool in TOOLS
        },
    }
    return schemathesis.openapi.from_dict(document)


@functools.cache
def _drawn(tool: str, mode: str, seed: int, examples: int) -> tuple[Any, ...]:
    """Request bodies drawn for one tool: the same for the same seed and count (on the same code), so kept on disk."""
    key = kept_draws.draw_key(tool, mode, seed, examples, CONTRACT.advertised_input_schema(tool))
    kept = kept_draws.read(key)
    if kept is not None:
        return kept
    bodies = _draw(tool, mode, seed, examples)
    kept_draws.keep(key, bodies)
    return bodies


def _draw(tool: str, mode: str, seed: int, examples: int) -> tuple[Any, ...]:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as fixed_seed
    from schemathesis import GenerationMode

    operation = _openapi()[f"/tools/{tool}"]["POST"]
    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    bodies: list[Any] = []

    @fixed_seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False)
    @given(operation.as_strategy(generation_mode=generation))
    def collect(case: Any) -> None:
        body = getattr(case, "body", None)
        if type(body).__name__ != "NotSet":
            bodies.append(copy.deepcopy(body))

    collect()
    return tuple(bodies)


def _key(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return repr(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def schemathesis_cases(tool: str, mode: str, *, seed: int, examples: int, purpose: str = DEFAULT_PURPOSE,
                       now: datetime | None = None) -> list[Case]:
    """Positive bodies repaired until the oracle judges them valid (others are dropped);
    negative bodies the oracle judges invalid (others are dropped). Duplicates are dropped."""
    now = now or utc_now()
    family = f"schemathesis-{mode}"
    out: list[Case] = []
    seen: set[str] = set()
    for i, drawn in enumerate(_drawn(tool, mode, seed, examples)):
        if mode == "positive":
            body = repair(tool, drawn, purpose=purpose, now=now)
            if body is None:
                continue
        else:
            body = bind_purpose(tool, drawn, purpose) if isinstance(drawn, dict) else drawn
        key = _key(body)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(body, bytes | bytearray):
            out.append(Case(family, tool, f"{mode} #{i}: raw bytes", bytes(body), False, "INVALID_SCHEMA", (), False))
            continue
        case = judged(family, tool, f"{mode} #{i}", body, now=now, intent=mode == "positive")
        if case.valid == (mode == "positive"):
            out.append(case)
    return out
