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
import subprocess
import sys
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


# What the harness's one door into the reference may load: the configuration writer and what it needs, never
# the engine, a store or an MCP edge.
DOOR_MODULES = {"engram_mcp.reference", "engram_mcp.reference.init", "engram_mcp.reference._init",
                "engram_mcp.reference._config", "engram_mcp.reference._crypto", "engram_mcp.reference._errors",
                "engram_mcp.reference._policy",
                "engram_mcp.reference._ports", "engram_mcp.reference._quotas", "engram_mcp.reference._store_config"}


def _loaded_by(module: str) -> set[str]:
    probe = f"import sys, {module}; print('\\n'.join(m for m in sys.modules if m.startswith('engram_mcp.reference')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return set(done.stdout.split())


def test_the_door_loads_the_configuration_writer_and_nothing_of_the_server() -> None:
    loaded = _loaded_by("engram_mcp.reference.init")
    assert "engram_mcp.reference._init" in loaded  # the probe saw the door itself
    assert loaded <= DOOR_MODULES, f"the door pulls in {sorted(loaded - DOOR_MODULES)}"


def test_the_engine_knows_stores_only_through_the_port() -> None:
    loaded = _loaded_by("engram_mcp.reference._core")
    stores = {m for m in loaded if m.rsplit(".", 1)[-1] in ("_store", "_sqlite", "_sqlite_tx", "_postgres")}
    assert "engram_mcp.reference._core" in loaded and not stores, f"the engine imports {sorted(stores)}"


# -- no import cycles, at run time: an import inside a function counts, one under TYPE_CHECKING does not -----------


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the package modules it imports at run time; ``sources``: module -> (source, is_package).
    ``from p import name`` reaches the module p.name when there is one, else p itself."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source)
        skipped = _type_checking_only(tree)
        package = module if is_package else module.rpartition(".")[0]
        reached: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                reached.update(alias.name for alias in node.names)
                continue
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            origin = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            reached.update(f"{origin}.{a.name}" if f"{origin}.{a.name}" in sources else origin for a in node.names)
        graph[module] = {target for target in reached if target in sources and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_package_module_imports_itself_round_about() -> None:
    sources = {module_name(path): (path.read_text(encoding="utf-8"), path.stem == "__init__")
               for package in LAYERS for path in _sources(package)}
    graph = import_graph(sources)
    assert sum(map(len, graph.values())) > 200, "the scan found too few imports to mean anything"
    assert cycles(graph) == [], "import cycles (break them by moving what both sides need, not by a local import)"


@pytest.mark.parametrize(("sources", "expected"), [
    ({"p.a": ("from p import b", False), "p.b": ("def f():\n    from p.a import x", False)}, [["p.a", "p.b"]]),
    ({"p.a": ("from p import b", False), "p.b": ("if TYPE_CHECKING:\n    from p.a import x", False)}, []),
    ({"p": ("from p.a import x", True), "p.a": ("from . import b", False), "p.b": ("import os", False)}, []),
    ({"p.a": ("from .b import y", False), "p.b": ("from .c import z", False), "p.c": ("from . import a", False)},
     [["p.a", "p.b", "p.c"]]),
])
def test_the_cycle_scan_finds_a_loop_and_only_a_loop(sources: dict[str, tuple[str, bool]],
                                                     expected: list[list[str]]) -> None:
    assert cycles(import_graph(sources)) == expected


# -- files one can read in one sitting ------------------------------------------------------------------------------

PACKAGE_LINES_MAX, TEST_LINES_MAX = 600, 800


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_file_is_longer_than_one_sitting() -> None:
    """A package module stays under 600 lines and a test module under 800: past that, split it by what it does."""
    packages = [path for folder in PACKAGE_DIRS.values() for path in (ROOT / folder).rglob("*.py")]
    tests = list((ROOT / "tests").rglob("*.py"))
    too_long = {str(p.relative_to(ROOT)): n for p in packages if (n := _lines(p)) > PACKAGE_LINES_MAX}
    too_long |= {str(p.relative_to(ROOT)): n for p in tests
                 if "node_modules" not in p.parts and (n := _lines(p)) > TEST_LINES_MAX}
    assert not too_long, f"longer than {PACKAGE_LINES_MAX} (package) or {TEST_LINES_MAX} (tests) lines: {too_long}"
