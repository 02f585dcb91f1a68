"""What engram-reference tells its operator: the next step after init, where serve listens and on which store,
and which file a bad --config names."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest

from engram_mcp.reference._config import load_config
from engram_mcp.reference._serve import store_label
from tests.reference.conftest import ENGRAM, free_port, stop


def test_init_prints_the_files_on_stdout_and_the_certifying_command_on_stderr(tmp_path: Path) -> None:
    done = subprocess.run([*ENGRAM, "init", str(tmp_path / "engram")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written = [Path(line) for line in done.stdout.splitlines()]
    assert written and all(path.exists() for path in written), "stdout must stay the list of files written"
    command = done.stderr.strip().splitlines()[-1]
    words = shlex.split(command)
    assert Path(words[0]).name == "conformance" or words[1:3] == ["-m", "engram_mcp.conformance"], command
    target = words[words.index("--target") + 1]
    config = Path(shlex.split(target.removeprefix("stdio:"))[-1])
    assert config == (tmp_path / "engram" / "server.toml").resolve()
    assert Path(words[words.index("--profile") + 1]).exists()
    # It runs as printed, from anywhere, with no virtual environment activated (one check keeps it short).
    bare = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    bare["PATH"] = "/usr/bin:/bin"
    ran = subprocess.run([*words, "--select", "discovery.granted-tools", "--era", "legacy"], capture_output=True,
                         text=True, timeout=240, cwd="/", env=bare)
    assert ran.returncode == 5 and "checks: 1 PASS" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]


def test_init_with_tools_grants_only_those_in_the_configuration_and_its_profile(tmp_path: Path) -> None:
    done = subprocess.run([*ENGRAM, "init", str(tmp_path), "--tools", "get,search"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("server.toml", "conformance-profile.toml"):
        scopes = tomllib.loads((tmp_path / name).read_text(encoding="utf-8"))["scopes"]
        grants = {tool for scope in scopes for tools in scope["principals"].values() for tool in tools}
        assert grants == {"engram_memory_search", "engram_memory_get"}, (name, grants)
    assert load_config(tmp_path / "server.toml").scopes, "the narrowed configuration still loads"


@pytest.mark.parametrize("tools", ["serch,get", ",", ""])
def test_init_refuses_tools_that_are_not_the_contracts_and_says_which(tmp_path: Path, tools: str) -> None:
    done = subprocess.run([*ENGRAM, "init", str(tmp_path / "engram"), "--tools", tools], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--tools takes some of search, get, capture" in done.stderr, done.stderr
    assert ("not a tool: serch" in done.stderr) == ("serch" in tools), done.stderr
    assert not (tmp_path / "engram" / "server.toml").exists(), "a refused init writes nothing"


def test_a_missing_configuration_is_named_without_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    done = subprocess.run([*ENGRAM, "serve", "--config", str(missing)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert str(missing) in done.stderr and "No such file" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_configuration_that_is_not_toml_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "server.toml"
    broken.write_text("[server\n", encoding="utf-8")
    done = subprocess.run([*ENGRAM, "serve", "--config", str(broken)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{broken} is not valid TOML" in done.stderr, done.stderr


def test_serve_over_http_says_where_it_listens_once_it_does(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    port = free_port()
    log = ref.path / "announce.log"
    with open(log, "wb") as errlog:
        process = subprocess.Popen([*ENGRAM, "serve", "--config", str(ref.config), "--http", f"127.0.0.1:{port}"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        deadline = time.monotonic() + 30
        while "listening on" not in log.read_text(encoding="utf-8"):
            assert process.poll() is None, f"the server exited with {process.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, "the server never said where it listens"
            time.sleep(0.05)
        line = log.read_text(encoding="utf-8")
        url = f"http://127.0.0.1:{port}/mcp"
        assert url in line and "store: SQLite file" in line, line
        # Announced only once bound: the URL it names answers at once (401: up, and guarded).
        assert httpx2.post(url, json={}, timeout=5).status_code == 401
    finally:
        stop(process)


def test_serve_over_stdio_names_its_store_on_stderr_only(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    done = subprocess.run([*ENGRAM, "serve", "--config", str(ref.config)], input="", capture_output=True,
                          text=True, timeout=60)
    assert done.stdout == "", "stdout carries MCP messages only"
    assert "serving MCP over stdio, store: SQLite file" in done.stderr, done.stderr


def test_a_postgresql_store_is_named_without_its_credentials(tmp_path: Path) -> None:
    url = "postgresql://engram:s3cret-word@db.internal:6543/memories?sslmode=require"
    done = subprocess.run([*ENGRAM, "init", str(tmp_path / "engram"), "--store", url], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    label = store_label(load_config(tmp_path / "engram" / "server.toml"))
    assert label == "store: PostgreSQL at db.internal:6543/memories", label
    assert "s3cret" not in label and "engram:" not in label


# Runs the command line in a process where the PostgreSQL driver cannot be imported, as in an install without
# the postgres extra.
WITHOUT_PSYCOPG = """
import sys
class NoDriver:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoDriver())
from engram_mcp.reference._cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_postgresql_store_without_its_driver_names_the_extra(tmp_path: Path) -> None:
    import sys

    init = subprocess.run([*ENGRAM, "init", str(tmp_path / "engram"), "--store",
                           "postgresql://nobody@127.0.0.1:1/none"], capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    done = subprocess.run([sys.executable, "-c", WITHOUT_PSYCOPG, "serve", "--config",
                           str(tmp_path / "engram" / "server.toml")], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "'.[postgres]'" in done.stderr and "psycopg" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "nobody" not in done.stderr
