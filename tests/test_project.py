"""The project's own promises: the README commands, CI, packaging and the command lines."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from engram_mcp.contract import load

ROOT = Path(__file__).resolve().parents[1]
DATA_DIRS = {"schemas": "schemas", "spec": "spec", "fixtures": "fixtures"}


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    return [b.strip() for b in blocks]


def test_readme_has_the_main_job_and_the_test_command() -> None:
    main_job, tests = readme_commands()[:2]
    assert "conformance --target reference" in main_job
    assert tests.endswith("pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert readme_commands()[1] in ci.splitlines()


def python_examples() -> list[tuple[str, int, str]]:
    """Every ```python block of the README and of spec/: (file, block number, code)."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "spec").glob("*.md"))]:
        blocks = re.findall(r"```python\n(.*?)\n```", path.read_text(encoding="utf-8"), re.S)
        found += [(path.relative_to(ROOT).as_posix(), n, code) for n, code in enumerate(blocks, 1)]
    return found


@pytest.mark.parametrize(("document", "number", "code"), python_examples(), ids=lambda v: str(v)[:40])
def test_every_python_example_in_the_documents_runs(document: str, number: int, code: str) -> None:
    # A fresh interpreter, as a reader would run it: nothing from the test session leaks in.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{document}, example {number}:\n{done.stderr[-2000:]}"


def test_the_documents_show_python_examples() -> None:
    assert {doc for doc, _, _ in python_examples()} >= {"README.md", "spec/model.md"}


@pytest.mark.parametrize("package", sorted(DATA_DIRS))
def test_every_data_file_ships_in_the_installed_package(package: str) -> None:
    """In CI the package is installed from a wheel, so this proves the data ships."""
    on_disk = {
        str(p.relative_to(ROOT / DATA_DIRS[package]))
        for p in (ROOT / DATA_DIRS[package]).rglob("*")
        if p.suffix in (".json", ".md") and p.is_file()
    }
    assert on_disk <= set(load().paths(package))


def test_every_python_package_is_declared_for_the_wheel() -> None:
    """A package missing from pyproject's list works in an editable install and vanishes from the wheel."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    declared = set(config["packages"])
    folders = {folder: package for package, folder in config["package-dir"].items()}
    found = set()
    for folder, package in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert found <= declared, sorted(found - declared)


def test_console_scripts_are_declared() -> None:
    scripts = {ep.name for ep in metadata.entry_points(group="console_scripts") if ep.value.startswith("engram_mcp.")}
    assert {"conformance", "engram-reference"} <= scripts


@pytest.mark.parametrize("module", ["engram_mcp.conformance._cli", "engram_mcp.reference._cli"])
def test_command_lines_answer_cleanly_without_a_traceback(module: str) -> None:
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 2)
    assert result.stdout or result.stderr


def test_no_top_level_reference_or_conformance_module_is_installed() -> None:
    for name in ("reference", "conformance", "contract"):
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import importlib.util,sys; sys.exit(importlib.util.find_spec({name!r}) is not None)",
            ],
            capture_output=True,
            cwd="/",
            timeout=60,
        )
        assert result.returncode == 0, name


def test_the_readme_names_what_the_extended_runs_are() -> None:
    """`pytest -m extended` (the longest runs, outside CI's budget) collects what the README lists, and no run of
    the default or the slow selection."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "-m", "extended", "--collect-only", "-q", "-p",
                             "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    files = {line.split("::")[0] for line in ids}
    assert files == {"tests/test_bench.py", "tests/conformance/test_explore_runs.py",
                     "tests/conformance/test_harness_e2e.py"}, files
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`.venv/bin/pytest -m extended`" in readme
    assert sum("test_harness_e2e.py" in line for line in ids) == 2 and "two more full certifications" in readme


# A silenced type or lint finding says why after its codes: a type-ignore in a second comment, a noqa after " - ".
_IGNORE, _NOQA = r"type:\s*ignore(\[[^\]]*\])?", r"noqa\b(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?"
_SILENCED = re.compile(rf"#\s*({_IGNORE}|{_NOQA})(?P<rest>.*)$")
_REASON = re.compile(r"^\s*(#|-|—)\s*\S")


def test_every_silenced_finding_gives_its_reason() -> None:
    bare = []
    for folder in ("conformance", "contract", "reference", "tests", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                found = _SILENCED.search(line)
                if found and not _REASON.match(found["rest"]):
                    bare.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()}")
    assert not bare, "a silenced finding without its reason:\n" + "\n".join(bare)
