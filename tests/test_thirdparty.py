"""The harness against servers nobody here wrote, and the reference server against the wider MCP ecosystem.

- ``conformance`` is run, as a user runs it, against two published MCP servers
  (``@modelcontextprotocol/server-memory`` and ``server-everything``) and
  against a naive server built in an afternoon on the SDK's high-level
  MCPServer (tests/thirdparty/naive_server.py). Each run must end with a clear
  verdict, no traceback and no hang, and the report must say why each check
  did not apply, or name the real defects;
- the official MCP conformance suite (``@modelcontextprotocol/conformance``)
  is run against the reference server over streamable HTTP, through
  ``conformance bearer-bridge``, which adds the host bearer token, and a host
  binding to the 2026-07-28 era's tool requests: every
  pinned release (0.1.11 on the system's Node; 0.1.16 and the 0.2 line, with
  the 2026-07-28 scenarios, on the npm registry's ``node@22``), each server
  scenario judged applicable or not in tests/thirdparty/official-scenarios.toml;
- the MCP Inspector's command line (``@modelcontextprotocol/inspector-cli``
  1.0.3 and ``@modelcontextprotocol/inspector`` 2.x) lists and calls the
  reference server's tools over stdio and HTTP;
- the README's blocks that run the inspector and the official suite are run
  as written, ``npx`` fetching from the npm registry what they name.

The npm packages are pinned in tests/thirdparty/package.json. Install them
with ``npm ci --prefix tests/thirdparty``; without them the tests that need
them are skipped and say so.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._bridge import bind
from engram_mcp.contract import load
from engram_mcp.contract.binding import HOST_BINDING_META_KEY
from tests.thirdparty_support import (
    CONFORMANCE,
    ENGRAM,
    NODE_MODULES,
    NODE_TIMEOUT,
    NPX_TIMEOUT,
    ROOT,
    SCOPED,
    START_TIMEOUT,
    THIRDPARTY,
    TRACEBACK,
    HarnessRun,
    ReferenceDir,
    blocks_cannot_run,
    free_port,
    init_reference,
    json_documents,
    node_missing,
    port_pair,
    run_command,
    run_harness,
    run_readme_block,
    stop,
    wait_for,
)

NAIVE_SERVER = THIRDPARTY / "naive_server.py"
TOOLS = tuple(load().tools)
# Seconds. A run that takes longer has hung; the usual run takes a fraction of this.
HARNESS_TIMEOUT = {"server-memory": 90, "server-everything": 90, "naive": 180}

needs_node = pytest.mark.skipif(node_missing() is not None, reason=node_missing() or "")


# -- the reference configuration and its host ------------------------------------


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return init_reference(tmp_path_factory.mktemp("thirdparty-reference"))


# -- harness runs --------------------------------------------------------------


@pytest.fixture(scope="module")
def run_of(reference_dir: ReferenceDir, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The run against a target, once per module and shared by its tests (a run takes seconds to a minute)."""
    runs: dict[str, HarnessRun] = {}

    def run(name: str) -> HarnessRun:
        if name not in runs:
            tmp = tmp_path_factory.mktemp(name)
            if name == "naive":
                target = "stdio:" + shlex.join([sys.executable, str(NAIVE_SERVER)])
            else:
                # server-memory keeps its graph in a file beside its script unless told otherwise.
                command = ["env", f"MEMORY_FILE_PATH={tmp / 'memory.jsonl'}", "node",
                           str(SCOPED / name / "dist" / "index.js")]
                target = "stdio:" + shlex.join(command + (["stdio"] if name == "server-everything" else []))
            # Fewer generated cases than the default: the naive server's defects show in the first few.
            options = ("--examples", "5") if name == "naive" else ()
            runs[name] = run_harness(target, reference_dir.profile, tmp / "report", HARNESS_TIMEOUT[name], *options)
            print(f"\n{name}: exit {runs[name].code} in {runs[name].elapsed:.1f} s; "
                  + ", ".join(f"{k} {v}" for k, v in sorted(runs[name].footer["counts"].items())))
        return runs[name]

    return run


def _assert_clean_verdict(run: HarnessRun, code: int = 1,
                          verdict: str = "VERDICT: not conformant (a MUST failed)") -> None:
    """The exit code and the summary a user reads, no traceback, no harness error, and no hang."""
    output = run.stdout + run.stderr
    assert run.code == code, f"{run.target}: exit {run.code}, not {code} ({verdict})\n{output[-3000:]}"
    assert TRACEBACK not in output, f"{run.target}: a Python traceback was printed\n{output[-3000:]}"
    assert verdict in run.stdout, run.stdout[-3000:]
    assert re.search(r"^checks: .*\d+ FAIL", run.stdout, re.M), "the summary has no checks line"
    assert re.search(r"^scored MUSTs at the contract level: \d+ passed, \d+ failed", run.stdout, re.M)
    assert re.search(r"^  FAIL EMC-", run.stdout, re.M), "the summary names no failed requirement"
    assert run.footer["exit_code"] == code
    errors = [(r["check"], r["message"]) for r in run.checks if r["status"] == "ERROR"]
    assert not errors, f"harness errors against {run.target}: {errors[:5]}"
    silent = [(r["check"], r["era"]) for r in run.checks if r["status"] in ("SKIP", "BLOCKED") and not r["message"]]
    assert not silent, f"checks skipped or blocked without a reason: {silent[:5]}"


# -- published servers: no engram tool, legacy era only ------------------------------

# What a server that is not an Engram memory server at all can fail, and why each is right:
# all of them judge tools/list or an unknown tool, which every MCP server answers.
NOT_ENGRAM_FAILS = {
    "discovery.granted-tools": "the profile grants the six contract tools; the target lists others",
    "discovery.opted-out-sees-nothing": "a tenant that is not opted in still discovers tools",
    "discovery.unknown-tool": "an unknown tool is an isError result, not JSON-RPC -32602",
    "binding.tools-list-untrusted": "tools/list with a garbage binding is served, not refused with -32603",
    "wiring.order-of-checks": "an unknown tool without a binding is judged as unknown before the binding",
}
# What the contract allows but this project's profile does not: PIN, never a contract failure.
NOT_ENGRAM_PINS = {
    "discovery.no-maintenance-tool": "tools beyond the contract's six are advertised (none of them maintenance)",
    "wiring.unbound-list-is-empty": "tools/list without any binding lists tools",
}
# Checks that need a contract tool: against a target that offers none, every one must SKIP or BLOCK.
TOOL_FAMILIES = ("arguments.", "envelope.", "gate.", "idempotency.", "lifecycle.", "not-found.", "search.",
                 "secrets.", "binding.untrusted-call", "binding.purpose-mismatch", "wiring.binding-",
                 "wiring.refusal-says-nothing", "wiring.state-ignored-when-ungated", "wiring.ids-derive-upstream",
                 "wiring.digests-recompute")
# A check held back for a tool names it in the report (missing_tools), or, in a check's own words, here.
MISSING_TOOL = re.compile(r"the target does not offer (engram_memory_\w+)")
OTHER_REASONS = re.compile(r"exists only in the 2026-07-28 era|applies to the 2026-07-28 era only"
                           r"|has no argument this family applies to"
                           r"|cannot be sent through an MCP SDK session")


@needs_node
@pytest.mark.parametrize("name", ["server-memory", "server-everything"])
def test_a_published_server_is_judged_cleanly(run_of: Any, name: str) -> None:
    run = run_of(name)
    # Not an Engram memory server: its own verdict and exit code, said before any count, and no list of
    # "not exercised" reasons that would each only repeat that the six tools are missing.
    _assert_clean_verdict(run, 6, "VERDICT: not an Engram memory server (it offers none of the six tools)")
    lines = run.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("NOT AN ENGRAM MEMORY SERVER: "))
    assert "none of the six Engram memory tools" in lines[said]
    assert said < next(i for i, line in enumerate(lines) if line.startswith("checks: ")), "said first"
    assert not any(line.startswith("not exercised (scored MUSTs)") for line in lines), run.stdout[-3000:]
    # The modern era: these servers refuse server/discover, so its checks are SKIPPED with that reason.
    assert "server/discover" in run.header["unsupported_eras"].get("modern", ""), run.header["unsupported_eras"]
    assert "era modern not spoken by the target" in run.stdout
    modern = [r for r in run.checks if r["era"] == "modern"]
    assert modern and all(r["status"] == "SKIP" and "does not speak the modern era" in r["message"] for r in modern)
    # What failed is what any MCP server can be judged on, and nothing else.
    unexpected = run.failed() - set(NOT_ENGRAM_FAILS)
    assert not unexpected, f"FAIL on checks that need a contract tool the target does not offer: {sorted(unexpected)}"
    assert "discovery.unknown-tool" in run.failed()
    pinned = {r["check"] for r in run.checks if r["era"] == "legacy" and r["status"] == "PIN"}
    assert set(NOT_ENGRAM_PINS) <= pinned, f"pinned: {sorted(pinned)}"
    # Every check that needs a contract tool ends SKIP (or BLOCKED) and says which tool is missing.
    named: set[str] = set()
    for result in (r for r in run.checks if r["era"] == "legacy" and r["check"].startswith(TOOL_FAMILIES)):
        assert result["status"] in ("SKIP", "N/A", "BLOCKED"), (result["check"], result["status"], result["message"])
        missing = result.get("missing_tools") or [m.group(1) for m in MISSING_TOOL.finditer(result["message"])]
        assert missing or OTHER_REASONS.search(result["message"]), (result["check"], result["message"])
        named.update(missing)
    assert named == set(TOOLS), f"the skip reasons name {sorted(named)}, not every contract tool"
    untrusted = run.results("binding.untrusted-call", "legacy")
    assert untrusted and all(r["status"] == "SKIP" and "engram_memory_search" in r["message"] for r in untrusted)


@needs_node
def test_server_memory_without_a_profile_is_told_apart_from_an_incomplete_run(tmp_path: Path) -> None:
    """Without a profile a target with no memory tool was once exit 5 among ~45 reasons, as if the profile lacked
    a scope: it is its own verdict, said first, and no "give the profile …" hint pretends a profile would help."""
    command = ["env", f"MEMORY_FILE_PATH={tmp_path / 'memory.jsonl'}", "node",
               str(SCOPED / "server-memory" / "dist" / "index.js")]
    run = run_harness("stdio:" + shlex.join(command), None, tmp_path / "report", HARNESS_TIMEOUT["server-memory"])
    output = run.stdout + run.stderr
    assert run.code == 6 and run.footer["exit_code"] == 6, output[-3000:]
    lines = run.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("NOT AN ENGRAM MEMORY SERVER: "))
    assert said < next(i for i, line in enumerate(lines) if line.startswith("checks: ")), "said first"
    assert "VERDICT: not an Engram memory server" in lines[-1]
    assert "a conformance profile (--profile FILE) unlocks" not in output
    assert not any(line.startswith("not exercised (scored MUSTs)") for line in lines), output[-3000:]


# -- the naive MCPServer: the contract's tools, none of its rules ------------------------

# check id -> (the defect, a fragment of the failure message or None)
NAIVE_DEFECTS = {
    "discovery.input-schemas": ("advertised input schemas are derived from signatures, not closed",
                                "the advertised inputSchema"),
    "discovery.unknown-tool": ("an unknown tool is an isError result, not -32602",
                               "the contract allows the JSON-RPC error -32602"),
    "envelope.structured-content": ("failures carry no structuredContent envelope", None),
    "envelope.failure-shape": ("errors are free text, not the constant error envelope", None),
    "envelope.success-shape": ("results are plain dicts, not {ok, output, auditId, redactionClass}", None),
    "arguments.host-owned-fields": ("extra fields (host-owned names) are silently ignored", "expected INVALID_SCHEMA"),
    "binding.untrusted-call": ("the host binding is never checked",
                               "where the contract wants the JSON-RPC error -32603"),
    "binding.purpose-mismatch": ("the purpose is not compared with the bound one",
                                 "the contract allows the JSON-RPC error -32603 (purpose)"),
}
# Defects that break only this project's pins: at the contract level the run shows them as PIN.
NAIVE_PIN_DEFECTS = {
    "wiring.binding-header": "a binding with key material in its header is served",
}


def test_the_naive_server_is_reported_with_its_real_defects(run_of: Any) -> None:
    run = run_of("naive")
    _assert_clean_verdict(run)
    assert run.header["unsupported_eras"] == {}, "the SDK's MCPServer speaks both eras"
    for check, (defect, fragment) in NAIVE_DEFECTS.items():
        for era in ("legacy", "modern"):
            failures = [r for r in run.results(check, era) if r["status"] == "FAIL"]
            assert failures, f"{check} ({defect}) did not FAIL in the {era} era: {dict(run.statuses(check, era))}"
            if fragment:
                assert any(fragment in r["message"] for r in failures), (check, era, failures[0]["message"])
    for check, defect in NAIVE_PIN_DEFECTS.items():
        for era in ("legacy", "modern"):
            assert set(run.statuses(check, era)) == {"PIN"}, f"{check} ({defect}): {dict(run.statuses(check, era))}"
    # Every forged binding is served, in both eras.
    untrusted = "binding.untrusted-call"
    assert set(run.statuses(untrusted, "legacy")) == set(run.statuses(untrusted, "modern")) == {"FAIL"}


# -- the official MCP conformance suite against the reference over HTTP -----------------

# Every pinned release of the suite, and every server scenario judged applicable or not: see the file.
OFFICIAL = tomllib.loads((THIRDPARTY / "official-scenarios.toml").read_text(encoding="utf-8"))
PASSING = frozenset({"SUCCESS", "INFO"})


@dataclass(frozen=True)
class OfficialSuite:
    version: str
    entry: Path
    node: Path | str
    line: str

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]

    def judged(self) -> dict[str, dict[str, Any]]:
        """The scenarios this release should list, with their judgements."""
        return {name: judgement for name, judgement in OFFICIAL["scenarios"].items()
                if judgement.get("since", "0.1") <= self.line}

    def missing(self) -> str | None:
        if not self.entry.exists():
            return f"{self.entry.relative_to(ROOT)} is missing: run `npm ci --prefix tests/thirdparty`"
        if isinstance(self.node, Path) and not self.node.exists():
            return f"{self.node.relative_to(ROOT)} is missing: run `npm ci --prefix tests/thirdparty`"
        return None


def _official_suites() -> list[OfficialSuite]:
    suites = []
    for version, pin in OFFICIAL["suites"].items():
        node: Path | str = "node" if pin["node"] == "system" else NODE_MODULES / pin["node"] / "bin" / "node"
        suites.append(OfficialSuite(version, NODE_MODULES / pin["package"] / "dist" / "index.js", node, pin["line"]))
    return suites


OFFICIAL_SUITES = _official_suites()


def _suite_cases(*, applicable_only: bool) -> list[Any]:
    """(suite, scenario) pairs; a not-applicable scenario is still a case, skipped with its reason."""
    return [pytest.param(suite, name, id=f"{suite.version}-{name}")
            for suite in OFFICIAL_SUITES for name, judgement in suite.judged().items()
            if not applicable_only or "applicable" in judgement]


@dataclass
class HttpReference:
    url: str  # through the bearer bridge, for clients that cannot send headers
    direct_url: str  # the reference itself, for clients that send the bearer token
    dir: ReferenceDir


@pytest.fixture(scope="module")
def reference_over_http(reference_dir: ReferenceDir) -> Iterator[HttpReference]:
    """engram-reference serve --http on 127.0.0.2:PORT, and the bearer bridge on 127.0.0.1:PORT."""
    port = port_pair()
    server = subprocess.Popen([*ENGRAM, "serve", "--http", f"127.0.0.2:{port}", "--config", str(reference_dir.config)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    bridge = subprocess.Popen([*CONFORMANCE, "bearer-bridge", "--listen", f"127.0.0.1:{port}",
                               "--upstream", f"http://127.0.0.2:{port}",
                               "--token-file", str(reference_dir.path / "keys" / "http-bearer.txt"),
                               "--bind-as", str(reference_dir.profile)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        wait_for(("127.0.0.2", port), server, "engram-reference serve --http")
        wait_for(("127.0.0.1", port), bridge, "conformance bearer-bridge")
        yield HttpReference(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.2:{port}/mcp", reference_dir)
    finally:
        stop(bridge)
        stop(server)


@needs_node
def test_the_pinned_official_releases_are_the_ones_judged() -> None:
    """package.json pins exactly the releases official-scenarios.toml judges (an unjudged pin runs nothing)."""
    pinned = json.loads((THIRDPARTY / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for suite in OFFICIAL_SUITES:
        package = json.loads((suite.entry.parents[1] / "package.json").read_text(encoding="utf-8"))
        assert package["name"] == "@modelcontextprotocol/conformance" and package["version"] == suite.version
    alias = "npm:@modelcontextprotocol/conformance@"
    official = {spec.removeprefix(alias) for name, spec in pinned.items()
                if name == "@modelcontextprotocol/conformance" or spec.startswith(alias)}
    assert official == {suite.version for suite in OFFICIAL_SUITES}


@needs_node
@pytest.mark.parametrize("suite", OFFICIAL_SUITES, ids=[s.version for s in OFFICIAL_SUITES])
def test_every_official_server_scenario_is_judged(suite: OfficialSuite) -> None:
    """A new scenario in a pinned release must be judged applicable or not before it is ignored."""
    if suite.missing():
        pytest.skip(suite.missing() or "")
    code, stdout, stderr, _ = run_command(suite.command("list", "--server"), timeout=NODE_TIMEOUT)
    assert code == 0, stderr[-2000:]
    # 0.1.11 prints "  - name"; later releases add the spec versions: "  - name [2025-06-18,2025-11-25]".
    listed = set(re.findall(r"^\s*-\s+(\S+)(?:\s+\[[^\]]*\])?\s*$", stdout, re.M))
    assert listed, stdout
    judged = suite.judged()
    both = [name for name, j in judged.items() if ("applicable" in j) == ("not_applicable" in j)]
    assert not both, f"each scenario is either applicable or not_applicable, with its reason: {both}"
    assert listed == set(judged), {"not judged": sorted(listed - set(judged)),
                                   "no longer listed": sorted(set(judged) - listed)}


def _untestable(judgement: dict[str, Any], check: dict[str, Any]) -> str | None:
    """Why a check that did not pass cannot run against the reference, if the judgement says so and the suite agrees."""
    entry = judgement.get("untestable", {}).get(check["id"])
    if entry is None:
        return None
    why, says = (entry, None) if isinstance(entry, str) else (entry["why"], entry["says"])
    message = check.get("errorMessage") or ""
    if says is not None:
        return why if says in message else None
    agrees = (check["status"] == "SKIPPED" or message.startswith("Not testable")
              or (check.get("details") or {}).get("untestable") is True)
    return why if agrees else None


def test_only_what_the_suite_itself_could_not_exercise_is_excused() -> None:
    """A check judged untestable is excused only while the suite says so; a real failure of it is not."""
    judgement = OFFICIAL["scenarios"]["server-stateless"]
    check = "sep-2575-server-no-log-without-loglevel"
    said = {"id": check, "status": "FAILURE", "errorMessage": "Not testable: no diagnostic tool"}
    assert _untestable(judgement, said)
    assert _untestable(judgement, {**said, "errorMessage": "Server dispatched a log frame"}) is None
    assert _untestable(judgement, {**said, "errorMessage": "", "details": {"untestable": True}})
    assert _untestable(judgement, {**said, "id": "sep-2575-server-implements-discover"}) is None
    caching = OFFICIAL["scenarios"]["caching"]
    listed = {"id": "sep-2549-prompts-list-caching-hints", "status": "FAILURE"}
    assert _untestable(caching, {**listed, "errorMessage": "prompts/list returned JSON-RPC error -32601"})
    assert _untestable(caching, {**listed, "errorMessage": "Not testable: ttl missing"}) is None


def test_the_bridge_binds_only_modern_tool_requests() -> None:
    def binder() -> dict[str, Any]:
        return {HOST_BINDING_META_KEY: "token"}

    modern = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"x": 1}}}
    bound = json.loads(bind(json.dumps(modern).encode(), binder))
    assert bound["params"]["_meta"] == {"x": 1, HOST_BINDING_META_KEY: "token"}
    deep = b"[" * 100_000 + b"]" * 100_000  # past the JSON parser's recursion limit: passed on as it came
    for untouched in ({**modern, "params": {}}, {**modern, "method": "ping"}, [modern], "not json", deep):
        body = untouched if isinstance(untouched, bytes) else (
            untouched if isinstance(untouched, str) else json.dumps(untouched)).encode()
        assert bind(body, binder) == body


BRIDGE = [*CONFORMANCE, "bearer-bridge"]


def test_bridge_usage_errors_exit_2_and_say_which(reference_dir: ReferenceDir, tmp_path: Path) -> None:
    token = str(reference_dir.path / "keys" / "http-bearer.txt")
    good = ["--listen", "127.0.0.1:1", "--upstream", "http://127.0.0.2:1", "--token-file", token]
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    cases = {
        "required": [],
        "--listen 'nope' is not HOST:PORT": [*good[2:], "--listen", "nope"],
        "--upstream 'ftp://127.0.0.2:1' is not an http(s):// URL": [*good[:2], *good[4:], "--upstream",
                                                                    "ftp://127.0.0.2:1"],
        "give the origin only": [*good[:2], *good[4:], "--upstream", "http://127.0.0.2:1/mcp"],
        "cannot read it (No such file or directory)": [*good[:4], "--token-file", str(tmp_path / "none")],
        "empty": [*good[:4], "--token-file", str(tmp_path / "empty")],
        "--bind-as: the profile is not valid": [*good, "--bind-as", str(reference_dir.config)],
    }
    for says, argv in cases.items():
        code, stdout, stderr, _ = run_command([*BRIDGE, *argv], timeout=START_TIMEOUT)
        assert code == 2 and says in stderr and not stdout, f"{argv}: exit {code}\n{stderr}"
        assert stderr.startswith(("conformance bearer-bridge: ", "usage: conformance bearer-bridge")), stderr
        assert TRACEBACK not in stderr, stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        code, _, stderr, _ = run_command([*BRIDGE, *good[2:], "--listen", listen], timeout=START_TIMEOUT)
    assert code == 3 and f"cannot listen on {listen}: Address already in use" in stderr, stderr
    assert TRACEBACK not in stderr


def test_the_bridge_tells_its_client_nothing_about_a_failure(reference_dir: ReferenceDir) -> None:
    """An unreachable upstream is a bare 502, and a request target that names a host is refused, not followed."""
    port = free_port()
    with socket.socket() as closed:  # bound and never listening: every connection to it is refused
        closed.bind(("127.0.0.1", 0))
        bridge = subprocess.Popen([*BRIDGE, "--listen", f"127.0.0.1:{port}",
                                   "--upstream", f"http://127.0.0.1:{closed.getsockname()[1]}",
                                   "--token-file", str(reference_dir.path / "keys" / "http-bearer.txt")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            wait_for(("127.0.0.1", port), bridge, "conformance bearer-bridge")
            for target, status, body in (("/mcp", 502, b"upstream unavailable"),
                                         ("http://elsewhere.example/mcp", 400, b"bad request")):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                    client.sendall(f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                   "Content-Length: 2\r\nConnection: close\r\n\r\n{}".encode())
                    reply = b""
                    while chunk := client.recv(65536):
                        reply += chunk
                head, _, content = reply.partition(b"\r\n\r\n")
                assert head.startswith(f"HTTP/1.1 {status} ".encode()) and content == body, reply
        finally:
            stop(bridge)
    assert bridge.stderr is not None
    assert TRACEBACK not in bridge.stderr.read().decode()


@needs_node
@pytest.mark.parametrize(("suite", "scenario"), _suite_cases(applicable_only=False))
def test_official_scenario_against_the_reference(suite: OfficialSuite, scenario: str,
                                                  reference_over_http: HttpReference, tmp_path: Path) -> None:
    judgement = suite.judged()[scenario]
    if "not_applicable" in judgement:
        pytest.skip(f"official {suite.version} scenario {scenario} not applicable: {judgement['not_applicable']}")
    if suite.missing():
        pytest.skip(suite.missing() or "")
    code, stdout, stderr, _ = run_command(suite.command("server", "--url", reference_over_http.url, "--scenario",
                                                        scenario, "-o", str(tmp_path)), timeout=NODE_TIMEOUT)
    saved = list(tmp_path.glob("*/checks.json"))
    assert len(saved) == 1, f"exit {code}; no checks.json was written\n{stdout[-2000:]}{stderr[-2000:]}"
    checks = json.loads(saved[0].read_text(encoding="utf-8"))
    print(f"{suite.version} {scenario} ({judgement['applicable']}): "
          + ", ".join(f"{c['id']} {c['status']}" for c in checks))
    bad, excused = [], set()
    for check in (c for c in checks if c["status"] not in PASSING):
        why = _untestable(judgement, check)
        if why is None:
            bad.append((check["id"], check["status"], check.get("errorMessage")))
        else:
            excused.add(check["id"])
    assert not bad, f"{suite.version} {scenario}: {bad}"
    stale = set(judgement.get("untestable", {})) - excused
    assert not stale, f"judged untestable, yet passed or not reported (update official-scenarios.toml): {sorted(stale)}"
    assert any(c["status"] == "SUCCESS" for c in checks), f"{scenario} passed nothing: {checks}"
    # The suite exits non-zero for any check that did not pass, including those it could not exercise.
    assert code == (1 if excused else 0), f"{scenario}: exit {code}\n{stdout[-2000:]}"


# -- the MCP Inspector's command line --------------------------------------------------


@dataclass(frozen=True)
class Inspector:
    """One pinned release of the MCP Inspector's command line, and how it is launched."""

    name: str
    node: Path | str
    entry: Path
    cwd: Path | None
    stdio_options_first: bool  # 2.x reads its options before "--" and the server's command after it

    def missing(self) -> str | None:
        for path in (self.entry, self.node):
            if isinstance(path, Path) and not path.exists():
                return f"{path.relative_to(ROOT)} is missing: run `npm ci --prefix tests/thirdparty`"
        return None

    def run(self, target: list[str], *options: str) -> tuple[int, Any, str]:
        """``target`` is ["--", command…] (stdio) or [URL, …]; the reply parsed as JSON when it is JSON."""
        stdio = target[0] == "--"
        args = [*options, *target] if stdio and self.stdio_options_first else [*target, *options]
        code, stdout, stderr, _ = run_command([str(self.node), str(self.entry), "--cli", *args],
                                              timeout=NODE_TIMEOUT, cwd=self.cwd)
        try:
            parsed = json.loads(stdout)
        except json.JSONDecodeError:
            parsed = None
        return code, parsed, stdout + stderr


INSPECTORS = [
    # inspector-cli 1.0.3 (deprecated upstream, Node 20) looks for "../package.json" relative to the working
    # directory but imports it relative to its own script; from its build folder the two agree. Its --metadata
    # takes every pair up to the end, "--" included, so the server's command comes first.
    Inspector("inspector-cli-1.0.3", "node", SCOPED / "inspector-cli" / "build" / "cli.js",
              SCOPED / "inspector-cli" / "build", stdio_options_first=False),
    # inspector 2.x (what `npx @modelcontextprotocol/inspector --cli` runs today) needs Node >= 22.19.
    Inspector("inspector-2.12.0", NODE_MODULES / "node22" / "bin" / "node",
              SCOPED / "inspector" / "clients" / "launcher" / "build" / "index.js", None, stdio_options_first=True),
]
each_inspector = pytest.mark.parametrize("inspector", INSPECTORS, ids=[i.name for i in INSPECTORS])


@pytest.fixture(scope="module")
def inspector_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return init_reference(tmp_path_factory.mktemp("inspector-reference"))


def _stdio_target(directory: ReferenceDir) -> list[str]:
    # After "--" comes the server's command line, so its own --config is not taken for the inspector's option.
    return ["--", *ENGRAM, "serve", "--config", str(directory.config)]


def _meta(directory: ReferenceDir) -> list[str]:
    return ["--metadata", f"{HOST_BINDING_META_KEY}={directory.binding()}"]


def _search(directory: ReferenceDir) -> list[str]:
    return ["--method", "tools/call", "--tool-name", "engram_memory_search", "--tool-arg", "query=ledger",
            "--tool-arg", f"purpose_ref={directory.purpose}"]


def _assert_search_envelope(reply: Any, output: str) -> None:
    assert isinstance(reply, dict), output[-2000:]
    envelope = reply.get("structuredContent")
    assert isinstance(envelope, dict) and envelope.get("ok") is True, reply
    assert set(envelope) == {"ok", "output", "auditId", "redactionClass"}
    assert isinstance(envelope["output"]["value"].get("records"), list)
    assert reply.get("isError") is False
    assert json.loads(reply["content"][0]["text"]) == envelope, "the text copy is not the envelope"


@needs_node
@each_inspector
def test_inspector_lists_and_calls_over_stdio(inspector: Inspector, inspector_dir: ReferenceDir) -> None:
    if inspector.missing():
        pytest.skip(inspector.missing() or "")
    stdio = _stdio_target(inspector_dir)
    code, listed, output = inspector.run(stdio, "--method", "tools/list", *_meta(inspector_dir))
    assert code == 0 and isinstance(listed, dict), output[-2000:]
    assert sorted(t["name"] for t in listed["tools"]) == sorted(TOOLS)
    code, unbound, output = inspector.run(stdio, "--method", "tools/list")
    assert code == 0 and unbound == {"tools": []}, f"tools/list with no binding is empty (EMC-HP-013): {output[-500:]}"
    code, reply, output = inspector.run(stdio, *_search(inspector_dir), *_meta(inspector_dir))
    assert code == 0, output[-2000:]
    _assert_search_envelope(reply, output)


@needs_node
@each_inspector
def test_inspector_lists_and_calls_over_http(inspector: Inspector, reference_over_http: HttpReference) -> None:
    if inspector.missing():
        pytest.skip(inspector.missing() or "")
    directory = reference_over_http.dir
    http = [reference_over_http.direct_url, "--transport", "http"]
    bearer = ["--header", f"Authorization: Bearer {directory.bearer}"]
    code, listed, output = inspector.run(http, *bearer, "--method", "tools/list", *_meta(directory))
    assert code == 0 and isinstance(listed, dict), output[-2000:]
    assert sorted(t["name"] for t in listed["tools"]) == sorted(TOOLS)
    code, reply, output = inspector.run(http, *bearer, *_search(directory), *_meta(directory))
    assert code == 0, output[-2000:]
    _assert_search_envelope(reply, output)
    # Refused with 401: 1.0.3 says "unauthorized"; 2.x would start OAuth, which a run without a TTY cannot.
    code, _, output = inspector.run(http, "--method", "tools/list", *_meta(directory))
    assert code != 0 and ("unauthorized" in output or "auth_required" in output), \
        f"no bearer token, yet served: {output[-500:]}"


# -- the README's blocks, run as written ----------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")

needs_npx = pytest.mark.skipif(blocks_cannot_run() is not None, reason=blocks_cannot_run() or "")


@needs_node
@needs_npx
@pytest.mark.timeout(NPX_TIMEOUT + 60)
def test_the_readmes_inspector_block_runs_as_written(tmp_path: Path) -> None:
    code, stdout, stderr = run_readme_block("### Calling the tools from MCP Inspector's CLI", tmp_path, free_port())
    assert code == 0, f"exit {code}\n{stdout[-2000:]}\n{stderr[-3000:]}"
    replies = json_documents(stdout)
    assert len(replies) == 4, f"{len(replies)} replies, not the four calls': {stdout[-2000:]}"
    listed, unbound, searched, over_http = replies
    for listing in (listed, over_http):
        assert sorted(t["name"] for t in listing["tools"]) == sorted(TOOLS), listing
    assert unbound == {"tools": []}, unbound
    _assert_search_envelope(searched, stdout)
    assert TRACEBACK not in stderr + (tmp_path / "server.log").read_text()


@needs_node
@needs_npx
@pytest.mark.timeout(NPX_TIMEOUT + 60)
def test_the_readmes_official_suite_block_runs_through_the_bridge(tmp_path: Path) -> None:
    code, stdout, stderr = run_readme_block("### The official MCP conformance suite", tmp_path, port_pair())
    output = ANSI.sub("", stdout)
    assert code == 0, f"exit {code}\n{output[-2000:]}\n{stderr[-3000:]}"
    assert "Running client scenario 'tools-list' against server: http://127.0.0.1:" in output, output
    assert re.search(r"\[tools-list\s*\]\s+SUCCESS ", output), output
    assert "Passed: 2/2, 0 failed" in output, output  # what the README says it prints
    bridge = (tmp_path / "bridge.log").read_text()
    assert "with the bearer token and host bindings for acme/research as agent-full" in bridge, bridge
    assert TRACEBACK not in stderr + bridge + (tmp_path / "server.log").read_text()
