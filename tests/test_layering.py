"""The layers stay apart: contract at the bottom, the reference and the harness on top, never through each other.

* the contract imports nothing above it (no reference, no harness);
* the reference never imports the harness;
* the harness imports from the reference only ``engram_mcp.reference.init``
  (a configuration and its profile), never a private module: a certified
  server is a black box, and the bundled one must be too. It serves the
  reference as any target, through its command line in another process.

Read from the source with ``ast`` (nothing is imported), so a deferred import
inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "tool"]["setuptools"]["package-dir"]
DATA = ("engram_mcp.schemas", "engram_mcp.spec", "engram_mcp.fixtures")
REFERENCE_DOORS = frozenset({"engram_mcp.reference.init"})  # importable by the harness


@dataclass(frozen=True)
class Reach:
    """One import of one module by another."""

    source: str
    line: int
    target: str


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def module_name(path: Path) -> str:
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        if path.is_relative_to(base):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    raise ValueError(f"{path} is in no mapped package")


def reaches(source: str, module: str, *, is_package: bool = False) -> Iterator[Reach]:
    """Every module this source imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Reach(module, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            yield Reach(module, node.lineno, origin)
            # `from engram_mcp.reference import _init` reaches the submodule, not just the package.
            for alias in node.names:
                yield Reach(module, node.lineno, f"{origin}.{alias.name}")


def _package_of(name: str) -> str:
    return ".".join(name.split(".")[:2])


def violation(reach: Reach) -> str | None:
    """Why this import breaks the layering, or None."""
    source, target = _package_of(reach.source), reach.target
    where = f"{reach.source}:{reach.line} imports {target}"
    if source == "engram_mcp.contract" and _under(target, "engram_mcp") and not (
            _under(target, "engram_mcp.contract") or any(_under(target, data) for data in DATA)):
        return f"{where}: the contract imports nothing above it"
    if source == "engram_mcp.reference" and _under(target, "engram_mcp.conformance"):
        return f"{where}: the reference never imports the harness"
    # The reference package itself holds only its docstring: `from engram_mcp.reference import init` names it.
    if (source == "engram_mcp.conformance" and _under(target, "engram_mcp.reference")
            and target != "engram_mcp.reference" and not any(_under(target, door) for door in REFERENCE_DOORS)):
        return f"{where}: the harness reaches the reference only through {sorted(REFERENCE_DOORS)}"
    return None


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / PACKAGE_DIRS[package]).rglob("*.py"))


LAYERS = ["engram_mcp.contract", "engram_mcp.reference", "engram_mcp.conformance"]


@pytest.mark.parametrize("package", LAYERS)
def test_the_package_keeps_to_its_layer(package: str) -> None:
    files = _sources(package)
    assert len(files) >= 5, f"{package}: the scan found too few files to mean anything"
    found = []
    for path in files:
        reached = list(reaches(path.read_text(encoding="utf-8"), module_name(path), is_package=path.stem == "__init__"))
        found += [why for why in map(violation, reached) if why]
    assert not found, "\n".join(found)


def test_the_harness_does_reach_the_reference_through_its_door() -> None:
    """The allowed path is in use: otherwise the rule above could pass by scanning the wrong files."""
    reached = {r.target for path in _sources("engram_mcp.conformance")
               for r in reaches(path.read_text(encoding="utf-8"), module_name(path))}
    assert reached & REFERENCE_DOORS


# -- the scanner itself: each rule catches what it is meant to ----------------------------------------------------


@pytest.mark.parametrize(("module", "source", "broken"), [
    ("engram_mcp.contract.x", "from engram_mcp.reference import ports", True),
    ("engram_mcp.contract.x", "def f():\n    import engram_mcp.conformance.hosts", True),
    ("engram_mcp.contract.x", "from . import _loader\nfrom engram_mcp.schemas import data", False),
    ("engram_mcp.reference.x", "from engram_mcp.conformance._profile import Profile", True),
    ("engram_mcp.reference.x", "from ._ports import Scope\nfrom engram_mcp.contract import load", False),
    ("engram_mcp.conformance.x", "from engram_mcp.reference._init import write_configuration", True),
    ("engram_mcp.conformance.x", "from engram_mcp.reference import _store", True),
    ("engram_mcp.conformance.suite.x", "from ...reference import _core", True),
    ("engram_mcp.conformance.x", "from engram_mcp.reference.init import write_configuration", False),
    ("engram_mcp.conformance.x", "from engram_mcp.reference import init", False),
])
def test_the_scanner_tells_a_breach_from_an_allowed_path(module: str, source: str, broken: bool) -> None:
    found = [why for why in map(violation, reaches(source, module)) if why]
    assert bool(found) == broken, found
