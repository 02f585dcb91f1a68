"""Exploration against real targets: the README's commands as written, long runs on both stores, and a
differential run SQLite against PostgreSQL (the long ones marked extended: `pytest -m extended`)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.catalog_runs import python_spelling
from tests.postgres_support import fresh_schema, server_url

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FAULTY = ROOT / "tests" / "faulty" / "targets.py"


def _readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Exploring call sequences"):]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert block is not None, "the exploration section shows no commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _conformance(line: str, cwd: Path, **replace: str) -> subprocess.CompletedProcess[str]:
    words = shlex.split(line)
    assert words[0] == "conformance", line
    swapped = [replace.get(word, word) for word in words[1:]]
    return subprocess.run([str(BIN / "conformance"), *swapped], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _results(report: Path, check: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in (report / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    return {r["era"]: r for r in lines if r.get("check") == check}


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("explore") / "init"
    subprocess.run([str(BIN / "engram-reference"), "init", str(directory)], check=True, capture_output=True)
    return directory


def _copy(init: Path, where: Path, store_url: str | None = None) -> Path:
    shutil.copytree(init, where, ignore=shutil.ignore_patterns("store"))
    if store_url is not None:
        with (where / "server.toml").open("a", encoding="utf-8") as config:
            config.write(f'\n[store]\nurl = "{store_url}"\n')
    return where


def _serve(config: Path) -> str:
    return "stdio:" + shlex.join([sys.executable, "-m", "engram_mcp.reference", "serve", "--config",
                                  str(config / "server.toml")])


def _faulty(name: str, config: Path) -> str:
    return "stdio:" + shlex.join([sys.executable, str(FAULTY), name, "--config", str(config / "server.toml")])


def test_the_readme_exploration_command_runs_as_written(tmp_path: Path) -> None:
    explore = _readme_block()[0]
    done = _conformance(explore, tmp_path)
    assert done.returncode == 5, done.stdout[-2000:]  # a --select run: incomplete at best
    results = _results(tmp_path / "explore-report", "explore.sequences")
    assert {era: r["status"] for era, r in results.items()} == {"legacy": "PASS", "modern": "PASS"}
    for result in results.values():
        assert result["evidence"]["explored"]["calls"] == 300
        assert any("key.replay -> ok" in key for key in result["evidence"]["coverage"])
    assert re.search(r"^explored: legacy 300 calls in \d+ programs", done.stdout, re.M), done.stdout[-2000:]


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory, init: Path) -> tuple[Path, Path]:
    """A defect the exploration finds, and the counterexample it wrote: (the faulty server's config, the file)."""
    where = tmp_path_factory.mktemp("found")
    faulty = _copy(init, where / "faulty")
    done = subprocess.run([str(BIN / "conformance"), "--target", _faulty("retry-other-reason-replays", faulty),
                           "--profile", str(faulty / "conformance-profile.toml"), "--select", "explore.sequences",
                           "--era", "legacy", "--report-dir", str(where / "report")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-2000:]
    failed = _results(where / "report", "explore.sequences")["legacy"]
    assert "EMC-IDEM-007" in failed["blamed"], failed
    (counterexample,) = (where / "report" / "counterexamples").glob("explore-legacy-*.jsonl")
    return faulty, counterexample


@pytest.mark.timeout(600)
def test_the_readme_replay_command_tells_a_defect_still_there_from_one_gone(tmp_path: Path,
                                                                          found: tuple[Path, Path]) -> None:
    faulty, counterexample = found
    replay = _readme_block()[1]
    placeholder = next(w for w in shlex.split(replay) if w.endswith(".jsonl"))
    target = next(w for w in shlex.split(replay) if w.startswith("stdio:"))
    again = _conformance(replay + f" --profile {faulty / 'conformance-profile.toml'}", tmp_path,
                         **{placeholder: str(counterexample), target: _faulty("retry-other-reason-replays", faulty)})
    assert again.returncode == 1 and "REPLAY: it still fails" in again.stdout, again.stdout[-2000:]
    fixed = _conformance(replay, tmp_path, **{placeholder: str(counterexample), target: "reference"})
    assert fixed.returncode == 0 and "REPLAY: no longer fails" in fixed.stdout, fixed.stdout[-2000:]


@pytest.mark.timeout(600)
def test_the_readme_diff_command_finds_the_divergence_and_none_between_equals(tmp_path: Path, init: Path,
                                                                             found: tuple[Path, Path]) -> None:
    faulty, _ = found
    diff = _readme_block()[2]
    words = shlex.split(diff)
    mine = next(w for w in words if w.startswith("stdio:"))
    profile = words[words.index("--profile") + 1]
    diverged = _conformance(diff, tmp_path, **{mine: _faulty("retry-other-reason-replays", faulty),
                                               profile: str(faulty / "conformance-profile.toml")})
    assert diverged.returncode == 1 and "DIFF: first divergence" in diverged.stdout, diverged.stdout
    assert "one answer is allowed by the contract, the other is not" in diverged.stdout
    assert python_spelling(diverged.stdout) is None, python_spelling(diverged.stdout)
    same = _conformance(diff, tmp_path, **{mine: _serve(_copy(init, tmp_path / "again")),
                                           profile: str(faulty / "conformance-profile.toml")})
    assert same.returncode == 0 and "DIFF: no divergence" in same.stdout, same.stdout + same.stderr[-2000:]


@pytest.fixture
def postgres_store() -> Iterator[str]:
    with fresh_schema(server_url()) as url:
        yield url


@pytest.mark.extended
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_long_exploration_of_the_reference_finds_nothing(tmp_path: Path, init: Path, store: str,
                                                          request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("postgres_store") if store == "postgresql" else None
    config = _copy(init, tmp_path / "config", url)
    done = subprocess.run([str(BIN / "conformance"), "--target", _serve(config), "--profile",
                           str(config / "conformance-profile.toml"), "--select", "explore.sequences",
                           "--explore", "1500", "--report-dir", str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=1800)
    results = _results(tmp_path / "report", "explore.sequences")
    assert {era: r["status"] for era, r in results.items()} == {"legacy": "PASS", "modern": "PASS"}, \
        {era: r["message"][:3000] for era, r in results.items()}
    assert done.returncode == 5
    assert all(r["evidence"]["explored"]["calls"] == 1500 for r in results.values())


@pytest.mark.extended
def test_sqlite_and_postgresql_stores_do_not_diverge(tmp_path: Path, init: Path, postgres_store: str) -> None:
    sqlite, postgres = _copy(init, tmp_path / "sqlite"), _copy(init, tmp_path / "postgres", postgres_store)
    done = subprocess.run([str(BIN / "conformance"), "diff", "--target", _serve(sqlite), "--target", _serve(postgres),
                           "--profile", str(sqlite / "conformance-profile.toml"), "--explore", "600"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0 and "DIFF: no divergence" in done.stdout, done.stdout + done.stderr[-2000:]
