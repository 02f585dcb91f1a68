"""The public API: the modules users import, what they export, and what the wheel and the sdist carry.

Public modules re-export what lives in private ones, so every public name must
be the private object itself (no copy that could drift), every exception
module must export exceptions, and every extension point must be a Protocol.
The build is the real one (``python -m build``: the sdist, then the wheel
from it, in an isolated environment) and must warn of nothing; it runs with
the deeper, slow tests.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {
    "engram_mcp.contract": None,
    "engram_mcp.contract.errors": None,  # gathered from the package's modules (each defines its own)
    "engram_mcp.contract.binding": None,  # a package: its modules are private, the package names the public
    "engram_mcp.reference.errors": None,
    "engram_mcp.reference.ports": "engram_mcp.reference._ports",
    "engram_mcp.reference.init": "engram_mcp.reference._init",
    "engram_mcp.reference.server": None,  # the assembly: the server, its ports and its configuration
    "engram_mcp.reference.testing": None,  # the store port's promises, as tests any store can run
    "engram_mcp.conformance.errors": None,
    "engram_mcp.conformance.hosts": None,
}
ERRORS = ["engram_mcp.contract.errors", "engram_mcp.reference.errors", "engram_mcp.conformance.errors"]
PROTOCOLS = {
    "engram_mcp.reference.ports": ["Cipher", "AdmissionPolicy"],
    "engram_mcp.conformance.hosts": ["HostBinding", "Confirmer", "AdapterFactory"],
}
BUILD_TIMEOUT = 300


def _defined_in(value: Any) -> str | None:
    return getattr(value, "__module__", None)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_a_public_module_exports_names_that_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} declares no __all__"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize(("name", "private"), [(n, p) for n, p in sorted(PUBLIC.items()) if p])
def test_a_public_module_re_exports_the_private_objects(name: str, private: str) -> None:
    module, source = importlib.import_module(name), importlib.import_module(private)
    for item in module.__all__:
        assert getattr(module, item) is getattr(source, item), f"{name}.{item} is not {private}.{item}"


@pytest.mark.parametrize("name", ERRORS)
def test_an_errors_module_exports_exceptions_defined_in_the_package(name: str) -> None:
    module = importlib.import_module(name)
    package = name.rpartition(".")[0]
    for item in module.__all__:
        value = getattr(module, item)
        assert isinstance(value, type) and issubclass(value, Exception), f"{name}.{item} is not an exception"
        assert (_defined_in(value) or "").startswith(package + "."), f"{name}.{item} comes from {_defined_in(value)}"


BASES = {"engram_mcp.contract.errors": "ContractError", "engram_mcp.reference.errors": "ReferenceServerError",
         "engram_mcp.conformance.errors": "ConformanceError"}


@pytest.mark.parametrize("name", ERRORS)
def test_every_exception_a_package_raises_shares_its_base(name: str) -> None:
    """One ``except`` catches whatever a package raises to its callers."""
    module = importlib.import_module(name)
    base = getattr(module, BASES[name])
    strays = [item for item in module.__all__ if not issubclass(getattr(module, item), base)]
    assert not strays, f"{name}: {strays} are not {BASES[name]}"


def test_every_exception_class_of_a_package_is_in_its_errors_module() -> None:
    """An exception a caller may meet and cannot import from ``errors`` is a gap in the API."""
    exported = {getattr(importlib.import_module(name), item) for name in ERRORS
                for item in importlib.import_module(name).__all__}
    # Caught inside the package (a DSSE format error becomes a CertificateError; a compiled validator's keyword
    # refusal becomes its "invalid"), or the suite's check machinery.
    internal = {"Blocked", "NotApplicable", "UnusableSchema", "EnvelopeError", "_Refused"}
    missing = []
    for package in ("engram_mcp.contract", "engram_mcp.reference", "engram_mcp.conformance"):
        folder = ROOT / package.rpartition(".")[2]
        for path in sorted(folder.glob("*.py")):
            # __main__ runs a command when imported; __init__ only re-exports.
            module = _import(f"{package}.{path.stem}") if path.stem not in ("__init__", "__main__") else None
            for value in vars(module).values() if module else ():
                if (isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module.__name__
                        and value not in exported and value.__name__ not in internal):
                    missing.append(f"{module.__name__}.{value.__name__}")
    assert not missing, missing


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # a __main__ or a script-like module that needs its own process
        return None


@pytest.mark.parametrize(("name", "protocols"), sorted(PROTOCOLS.items()))
def test_extension_points_are_protocols(name: str, protocols: list[str]) -> None:
    module = importlib.import_module(name)
    for item in protocols:
        assert getattr(getattr(module, item), "_is_protocol", False), f"{name}.{item} is not a typing.Protocol"


def test_the_license_is_the_apache_2_0_text() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


# -- the built distributions -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The sdist and the wheel ``python -m build`` makes from a copy of the tree, and what it printed."""
    source = tmp_path_factory.mktemp("source") / "tree"
    skip = shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__", "*.egg-info", "build", "dist",
                                  ".typecheck", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    shutil.copytree(ROOT, source, ignore=skip, symlinks=True)
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # it makes setuptools warn
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return sdist, wheel, result.stdout + result.stderr


@pytest.mark.slow  # a real isolated build: kept with the deeper runs
def test_the_build_warns_of_nothing(built: tuple[Path, Path, str]) -> None:
    output = built[2]
    warnings = [line for line in output.splitlines() if "warning" in line.lower() or "would be ignored" in line]
    assert not warnings, "\n".join(warnings)


@pytest.mark.slow  # a real isolated build: kept with the deeper runs
def test_the_wheel_carries_the_packages_the_data_the_license_and_the_changelog(built: tuple[Path, Path, str]) -> None:
    with zipfile.ZipFile(built[1]) as wheel:
        names = set(wheel.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = wheel.read(f"{info}/METADATA").decode("utf-8")
        entry_points = wheel.read(f"{info}/entry_points.txt").decode("utf-8")
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").strip() in metadata  # the long description ends with it
    for name in PUBLIC:
        assert name.replace(".", "/") + ".py" in names or name.replace(".", "/") + "/__init__.py" in names, name
    for folder, package in (("schemas", "engram_mcp/schemas"), ("spec", "engram_mcp/spec"),
                            ("fixtures", "engram_mcp/fixtures")):
        on_disk = {f"{package}/{p.relative_to(ROOT / folder).as_posix()}" for p in (ROOT / folder).rglob("*")
                   if p.suffix in (".json", ".md") and p.is_file()}
        assert on_disk <= names, sorted(on_disk - names)[:5]
    assert not any(n.startswith(("tests/", "tools/", ".typecheck/")) for n in names)
    assert "conformance = engram_mcp.conformance._cli:main" in entry_points


@pytest.mark.slow  # a real isolated build: kept with the deeper runs
def test_the_sdist_carries_the_license_the_changelog_and_the_readme(built: tuple[Path, Path, str]) -> None:
    with tarfile.open(built[0]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= names


THIRD_PARTY_STORE_TESTS = '''
from contextlib import ExitStack

import pytest

from engram_mcp.reference._store import SqliteStore as MyStore  # stands for a store of someone else's
from engram_mcp.reference.testing import *  # noqa: F403 - the tests, collected where they are imported
from engram_mcp.reference.testing import StoreSite


@pytest.fixture
def site(tmp_path):
    with ExitStack() as handles:
        yield StoreSite(lambda: MyStore(tmp_path / "store" / "memory.sqlite3"), handles)
'''


def test_the_shipped_store_suite_runs_for_a_store_outside_the_repository(tmp_path: Path) -> None:
    """The recipe of engram_mcp.reference.testing's docstring, in a folder of its own: every shipped test runs."""
    from engram_mcp.reference import testing

    (tmp_path / "test_my_store.py").write_text(THIRD_PARTY_STORE_TESTS, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    shipped = [name for name in testing.__all__ if name.startswith("test_")]
    assert done.returncode == 0 and f"{len(shipped)} passed" in done.stdout, done.stdout[-3000:]
