"""Both variant catalogs, built in process: every variant still changes what it claims, through a seam.

The slow runs (tests/test_faulty_targets.py, tests/test_benign_variants.py) judge each variant with
the real harness; these tests take a second and fail at once when a refactor of the reference would
leave a variant changing nothing: each variant must record at least one change on its ``Seams``, and
every recorded change must reach the server built from them (a port the server uses, the class of an
engine part, a hook at its edge). A variant never reaches past the seams: no assignment to a private
member, no frame inspection, no module global patched.
"""

from __future__ import annotations

import ast
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client
from mcp.types import RequestParamsMeta

from engram_mcp.reference._envelope import tool_result
from engram_mcp.reference.server import ReferenceServer, load_config
from tests.benign import targets as benign
from tests.faulty import targets as faulty
from tests.reference.conftest import init_reference_dir, search_args
from tests.variant_server import PORTS, SeamMissing, Seams, VariantServer

ROOT = Path(__file__).resolve().parents[1]
CATALOG_FILES = sorted([*(ROOT / "tests" / "faulty").glob("*.py"), *(ROOT / "tests" / "benign").glob("*.py"),
                        ROOT / "tests" / "variant_server.py"])
FAULTY = [name for name, item in faulty.VARIANTS.items() if not item.outside_seams]
BENIGN = list(benign.VARIANTS)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("catalogs") / "init"
    subprocess.run([sys.executable, "-m", "engram_mcp.reference._cli", "init", str(directory)], check=True,
                   capture_output=True, timeout=120)
    return directory / "server.toml"


@contextlib.contextmanager
def built(config_path: Path, apply: Any = None) -> Iterator[tuple[Seams, VariantServer]]:
    seams = Seams(load_config(config_path))
    if apply is not None:
        apply(seams)
    server = seams.build()
    try:
        yield seams, server
    finally:
        server.close()


@pytest.fixture(scope="module")
def pristine(config_path: Path) -> Iterator[VariantServer]:
    with built(config_path) as (_, server):
        yield server


def assert_changes_reach_the_server(seams: Seams, server: VariantServer, pristine: VariantServer, name: str) -> None:
    assert seams.changes, f"{name}: the variant records no change on its seams"
    for port in {port for port, _ in seams.port_changes}:
        used, default = getattr(server.ports, port), getattr(pristine.ports, port)
        assert used != default, f"{name}: its {port} port is the default one"
        if port == "policies":  # read by the edge (quotas) and by the lifecycle (admission, retention)
            assert server.policy_for is used and server.engine.lifecycle.policy_for is used, name
        else:
            assert getattr(server, port) is used, f"{name}: the server does not use its {port} port"
    for part, cls in seams.part_classes.items():
        instance = server.engine if part == "engine" else getattr(server.engine, part, None)
        if part == "cursors":
            instance = server.engine.recall.cursors
        assert type(instance) is cls, f"{name}: the engine's {part} is a {type(instance).__name__}, not the variant's"
    if seams.configured:
        assert server.config == seams.config != pristine.config, f"{name}: the configuration is unchanged"
    if seams.tool_changes:
        assert server.tools != pristine.tools, f"{name}: the advertised tools are unchanged"


@pytest.mark.parametrize("name", FAULTY)
def test_each_faulty_variant_changes_the_server_through_a_seam(config_path: Path, pristine: VariantServer,
                                                               name: str) -> None:
    with built(config_path, faulty.VARIANTS[name].apply) as (seams, server):
        assert_changes_reach_the_server(seams, server, pristine, name)


@pytest.mark.parametrize("name", BENIGN)
def test_each_benign_variant_changes_the_server_through_a_seam(config_path: Path, pristine: VariantServer,
                                                               name: str) -> None:
    with built(config_path, benign.VARIANTS[name].apply) as (seams, server):
        assert_changes_reach_the_server(seams, server, pristine, name)


def test_a_seam_that_is_gone_fails_the_build_at_once() -> None:
    """What keeps a refactor from disabling a variant silently: the seam it names must exist."""
    seams = Seams(config=None)  # type: ignore[arg-type]  # nothing is built from it
    with pytest.raises(SeamMissing):
        seams.override("recall", "a_method_renamed_away", lambda inherited: inherited)
    with pytest.raises(SeamMissing):
        seams.override("engine_part_renamed_away", "call", lambda inherited: inherited)
    with pytest.raises(SeamMissing):
        seams.port("a_port_renamed_away", lambda port: port)
    assert "gates" in PORTS and "host" in PORTS


# -- the edge's hooks are live -------------------------------------------------------------------------------------


EDGE_OVERRIDES = ("call_tool", "list_tools", "serve", "run")


def test_the_variant_server_overrides_only_steps_the_reference_has() -> None:
    """A step renamed in the reference would leave the variant server's override of it never called."""
    for name in EDGE_OVERRIDES:
        assert callable(ReferenceServer.__dict__.get(name)), f"ReferenceServer has no step {name!r} any more"
        assert name in VariantServer.__dict__, f"VariantServer no longer hooks {name!r}"


@pytest.mark.anyio
async def test_every_kind_of_seam_is_on_the_path_of_a_call(tmp_path: Path) -> None:
    """One hook of each kind, one port and one engine part, all asked while a search and a listing are served."""
    reference = init_reference_dir(tmp_path / "engram")
    asked: list[str] = []

    def noting(kind: str, value: Any = None) -> Any:
        asked.append(kind)
        return value

    async def before(request: Any, params: Any) -> Any:
        return noting("before", params)

    async def intercept(request: Any, params: Any) -> None:
        noting("intercept")

    async def after(request: Any, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        return noting("after", envelope)

    async def around(call: Any, serve: Any) -> Any:
        noting("around")
        return await serve(call)

    async def list_around(request: Any, params: Any, handler: Any) -> Any:
        noting("list_around")
        return await handler(request, params)

    class NotedDeadlines:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def passed(self, call: Any, stage: Any) -> bool:
            noting(f"deadlines:{stage}")
            return bool(self.inner.passed(call, stage))

    def searching(search: Any) -> Any:
        return lambda caller, arguments, now: noting("operation", search(caller, arguments, now))

    seams = Seams(load_config(reference.config))
    seams.before.append(before)
    seams.intercept.append(intercept)
    seams.after.append(after)
    seams.around.append(around)
    seams.list_around.append(list_around)
    seams.rewrites.append(lambda request, params, envelope: noting("rewrite", envelope))
    seams.list_rewrites.append(lambda request, result: noting("list_rewrite", result))
    seams.render = lambda envelope: noting("render", tool_result(envelope))
    seams.port("deadlines", NotedDeadlines)
    seams.wrap_operation("engram_memory_search", searching)
    server = seams.build()
    try:
        async with Client(server.server, mode="legacy", cache=None) as client:
            meta = cast(RequestParamsMeta, reference.host.meta())  # the host's _meta: a TypedDict the SDK keeps open
            listed = await client.list_tools(meta=meta)
            result = await client.call_tool("engram_memory_search", search_args("anything"), meta=meta)
    finally:
        server.close()
    assert listed.tools and result.structured_content and result.structured_content["ok"], result
    expected = ["list_around", "list_rewrite", "before", "intercept", "deadlines:arrival", "around",
                "deadlines:before-commit", "operation", "after", "rewrite", "render"]
    assert asked == expected


# -- no variant reaches past the seams ----------------------------------------------------------------------------


MODULE_ALIASES = ("_module", "_server", "_serve")  # how the catalogs once named the modules they patched


def _reaches_past(attribute: ast.Attribute) -> bool:
    """A private member of anything but ``self``/``cls``, or any member of a module imported under an alias."""
    owner = attribute.value.id if isinstance(attribute.value, ast.Name) else None
    if owner in ("self", "cls"):
        return False
    return attribute.attr.startswith("_") or (owner is not None and owner.endswith(MODULE_ALIASES))


def past_the_seams(source: str) -> list[str]:
    """Where the source assigns to a private member (not of ``self`` or ``cls``), sets attributes by name,
    inspects frames or patches a module's global."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            found += [f"line {leaf.lineno}: assigns {ast.unparse(leaf)}" for leaf in ast.walk(target)
                      if isinstance(leaf, ast.Attribute) and _reaches_past(leaf)]
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called in ("setattr", "object.__setattr__", "sys._getframe", "inspect.currentframe"):
                found.append(f"line {node.lineno}: calls {called}")
    return found


def test_no_catalog_module_reaches_past_the_seams() -> None:
    offenders = {path.name: hits for path in CATALOG_FILES if (hits := past_the_seams(path.read_text()))}
    assert not offenders, offenders


@pytest.mark.parametrize(("source", "expected"), [
    ("server._confirm = f", ["line 1: assigns server._confirm"]),
    ("server.engine._operations['x'] = f", ["line 1: assigns server.engine._operations"]),
    ("binding_module.LIMIT = 1", ["line 1: assigns binding_module.LIMIT"]),
    ("object.__setattr__(config, 'x', 1)", ["line 1: calls object.__setattr__"]),
    ("name = sys._getframe(1).f_code.co_name", ["line 1: calls sys._getframe"]),
    ("self._inner = inner", []),
    ("seams.render = render", []),
])
def test_the_scan_sees_what_it_looks_for(source: str, expected: list[str]) -> None:
    assert past_the_seams(source) == expected
