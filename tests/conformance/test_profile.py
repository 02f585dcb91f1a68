"""The profile as a validated format, runs without one, and what the user reads when a target cannot be reached."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from jsonschema import Draft202012Validator

from engram_mcp.conformance._connect import Connection, TargetUnreachable, leaf_exceptions, parse_target
from engram_mcp.conformance._host import ElicitationConfirmer, NoBinding, references_from_profile
from engram_mcp.conformance._profile import (
    NEEDS_PROFILE,
    Profile,
    ProfileError,
    TomlLines,
    load_profile,
    validate_profile_data,
)
from engram_mcp.conformance.hosts import host_from_profile
from engram_mcp.contract import load
from engram_mcp.contract.binding import HOST_BINDING_META_KEY
from engram_mcp.reference._init import write_configuration
from engram_mcp.reference._policy import POLICIES

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
SERVE = [sys.executable, "-m", "engram_mcp.reference._cli", "serve"]
SCHEMA = load().data_schema("profile")
THIRDPARTY = Path(__file__).resolve().parents[1] / "thirdparty"
SERVER_MEMORY = THIRDPARTY / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("profile-reference")
    write_configuration(directory, seed="profile")
    return directory


def _profile(reference: Path, tmp_path: Path, edit: str = "", append: str = "") -> Path:
    """The generated profile with one edit ("old=>new") and text appended, written beside the reference's keys."""
    text = (reference / "conformance-profile.toml").read_text(encoding="utf-8")
    if edit:
        old, new = edit.split("=>")
        assert old in text, old
        text = text.replace(old, new, 1)
    path = reference / f"edited-{tmp_path.name}.toml"
    path.write_text(text + append, encoding="utf-8")
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    return str(refused.value)


def _line_of(path: Path, fragment: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if fragment in line)


def conformance(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CONFORMANCE, *args], capture_output=True, text=True, timeout=timeout, cwd="/")


# -- the schema ---------------------------------------------------------------------


def test_the_profile_schema_is_a_closed_2020_12_schema_loaded_with_the_others() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$id"] == "https://engram-mcp.invalid/schemas/1.0.0/data/profile.schema.json"
    assert load().resolve("data/profile.schema.json") == SCHEMA  # in the contract's registry

    def tables(node: object) -> Iterator[dict]:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                yield node
            for value in node.values():
                yield from tables(value)

    closed = list(tables(SCHEMA))
    assert len(closed) >= 5 and all(t["additionalProperties"] is False for t in closed)


def test_the_profile_schema_names_the_contracts_tools_and_the_references_policies() -> None:
    scope = SCHEMA["$defs"]["scope"]["properties"]
    assert scope["principals"]["additionalProperties"]["items"]["enum"] == list(load().tools)
    assert set(scope["admission_policy"]["enum"]) == set(POLICIES) | {"unknown"}


def test_every_key_of_the_schema_is_documented() -> None:
    page = load().text("spec", "profile.md")
    keys = [*SCHEMA["properties"], *SCHEMA["$defs"]["scope"]["properties"]]
    for table in ("target", "binding", "http"):
        keys += list(SCHEMA["properties"][table]["properties"])
    assert [key for key in keys if f"`{key}`" not in page and f"[{key}]" not in page and f"[[{key}]]" not in page] == []


def test_the_generated_profile_validates_against_the_schema(reference: Path) -> None:
    path = reference / "conformance-profile.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert list(load().validator(SCHEMA).iter_errors(data)) == []
    assert validate_profile_data(data, path.read_text(encoding="utf-8"), path) == []
    assert load_profile(path).scope_for() is not None


# -- refusals with the file, the key path and the line --------------------------------


def test_a_quoted_boolean_is_refused_not_read_as_true(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, 'memory = false=>memory = "false"')
    message = _refusal(path)
    line = _line_of(path, 'memory = "false"')
    assert (
        f'{path}:{line}: scopes[4].memory: must be a boolean (true or false, unquoted), not the string "false"'
        in message
    )


def test_an_unknown_key_is_refused_with_its_line_and_a_suggestion(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, "confirm_capture = false=>confirm_captur = false")
    message = _refusal(path)
    line = _line_of(path, "confirm_captur =")
    assert f"{path}:{line}: scopes[0].confirm_captur: unknown key (did you mean 'confirm_capture'?)" in message


def test_an_unknown_table_is_refused(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, append='\n[targets]\naudience = "x"\n')
    message = _refusal(path)
    assert f"{path}:{_line_of(path, '[targets]')}: targets: unknown key (did you mean 'target'?)" in message


@pytest.mark.parametrize(("edit", "fragment", "expected"), [
    ("confirmation_ttl_seconds = 4=>confirmation_ttl_seconds = \"4\"", 'confirmation_ttl_seconds = "4"',
     'scopes[0].confirmation_ttl_seconds: must be an integer, not the string "4"'),
    ('"agent-limited" = [=>"agent-limited" = "engram_memory_search" #[', '"agent-limited" = "engram',
     'scopes[0].principals.agent-limited: must be an array, not the string "engram_memory_search"'),
    ('admission_policy = "secret-scan"=>admission_policy = "scan"', 'admission_policy = "scan"',
     'scopes[0].admission_policy: must be one of "accept", "reject", "secret-scan", "adjudicate", "unknown"'),
    ("confirmation_ttl_seconds = 4=>confirmation_ttl_seconds = 0", "confirmation_ttl_seconds = 0",
     "scopes[0].confirmation_ttl_seconds: must be at least 1, not 0"),
    ('modes = ["host-reference", "server-initiated"]=>modes = []', "modes = []",
     "confirmation.modes: must not be empty"),
    ('modes = ["host-reference", "server-initiated"]=>modes = ["host-reference", "host-reference"]', "modes = [",
     "confirmation.modes: lists an item twice"),
    ('modes = ["host-reference", "server-initiated"]=>modes = ["push"]', "modes = [",
     'confirmation.modes[0]: must be one of "host-reference", "server-initiated", not the string "push"'),
    ("reference_ttl_seconds = 300=>reference_ttl_seconds = 301", "reference_ttl_seconds = 301",
     "confirmation.reference_ttl_seconds: must be at most 300, not 301"),
], ids=["integer-as-string", "grants-as-string", "unknown-policy", "ttl-zero", "no-mode", "mode-twice", "unknown-mode",
        "ttl-over-the-limit"])
def test_a_wrong_type_or_value_names_the_key_and_its_line(reference: Path, tmp_path: Path, edit: str,
                                                          fragment: str, expected: str) -> None:
    path = _profile(reference, tmp_path, edit)
    assert f"{path}:{_line_of(path, fragment)}: {expected}" in _refusal(path)


@pytest.mark.parametrize(("edit", "fragment", "key"), [
    ("confirmation_ttl_seconds = 4=>confirmation_ttl_seconds = {over}", "confirmation_ttl_seconds = {over}",
     "scopes[0].confirmation_ttl_seconds"),
    ("reference_ttl_seconds = {ceiling}=>reference_ttl_seconds = {over}", "reference_ttl_seconds = {over}",
     "confirmation.reference_ttl_seconds"),
], ids=["scope-ttl", "reference-ttl"])
def test_a_ttl_over_the_contracts_ceiling_is_refused_naming_the_requirement(
    reference: Path, tmp_path: Path, edit: str, fragment: str, key: str
) -> None:
    """The ceiling is read from spec/limits.json, not typed into the schema: one second over it is refused."""
    ceiling = load().limit("confirmation.ttl.max")
    values = {"ceiling": ceiling, "over": ceiling + 1}
    path = _profile(reference, tmp_path, edit.format(**values))
    message = _refusal(path)
    assert (f"{path}:{_line_of(path, fragment.format(**values))}: {key}: must be at most {ceiling}, "
            f"not {ceiling + 1} (EMC-GATE-004") in message
    at_ceiling = _profile(reference, tmp_path, edit.format(**{**values, "over": ceiling}))
    assert load_profile(at_ceiling).scope_for() is not None


def test_a_missing_required_key_is_named_at_its_table(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, "kid = =>kidd = ")
    message = _refusal(path)
    assert f"{path}:{_line_of(path, '[binding]')}: binding.kid: required key is missing" in message
    assert "binding.kidd: unknown key (did you mean 'kid'?)" in message


def test_a_toml_syntax_error_shows_file_line_and_column(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, "[binding]=>[binding]\nkind = ")
    message = _refusal(path)
    line = _line_of(path, "[binding]") + 1  # the line of the value that is missing
    assert message.startswith(f"{path}:{line}:") and "TOML syntax error" in message
    assert message.split(":")[2].isdigit()  # the column


def test_a_key_file_that_is_missing_names_the_key_and_its_line(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, "keys/host.key.pem=>keys/nowhere.pem")
    assert f"{path}:{_line_of(path, 'nowhere.pem')}: binding.private_key_file: no such file" in _refusal(path)


def test_an_unreadable_profile_says_which_file(tmp_path: Path) -> None:
    assert _refusal(tmp_path / "absent.toml").startswith(f"{tmp_path / 'absent.toml'}: cannot read the profile")


def test_key_lines_follow_tables_arrays_of_tables_dotted_and_quoted_keys() -> None:
    text = "\n".join([
        "# a comment",                    # 1
        "[target]",                       # 2
        'audience = "a"',                 # 3
        "[[scopes]]",                     # 4
        "tenant = 't'",                   # 5
        "[[scopes]]",                     # 6
        "grants = [",                     # 7
        "  'x = 1',",                     # 8  (inside a multi-line array: defines no key)
        "]",                              # 9
        "[scopes.principals]",            # 10
        '"agent one" = []',               # 11
        "http.headers.X-Trace = 'on'",    # 12
    ])
    lines = TomlLines(text)
    assert lines.line(("target", "audience")) == 3
    assert lines.line(("scopes", 0, "tenant")) == 5
    assert lines.line(("scopes", 1, "grants")) == 7
    assert lines.line(("scopes", 1, "grants", 0)) == 7  # inside a value: the key that holds it
    assert ("scopes", 1, "x") not in lines.lines and lines.line(("scopes", 1, "x")) == 6  # falls back to its table
    assert lines.line(("scopes", 1, "principals", "agent one")) == 11
    assert lines.line(("scopes", 1, "principals", "http", "headers", "X-Trace")) == 12
    assert lines.line(("nowhere",)) is None


# -- a run without a profile ----------------------------------------------------------


def test_the_absent_profile_binds_nothing_and_says_what_would_unlock_a_check() -> None:
    absent = Profile.absent()
    assert absent.scopes == () and absent.scope_for() is None and not absent.given
    assert absent.lacks("second-tenant").startswith(NEEDS_PROFILE)
    host, _ = host_from_profile(absent)
    assert isinstance(host, NoBinding) and host.forgeries == frozenset({"missing", "garbage"})
    with pytest.raises(pytest.skip.Exception, match=r"needs a conformance profile \(--profile\)"):
        host.forged("expired", None, "p")  # type: ignore[arg-type]  # NoBinding reads no scope
    assert host.forged("missing", None, "p") == {}  # type: ignore[arg-type]  # NoBinding reads no scope
    assert host.forged("garbage", None, "p") == {HOST_BINDING_META_KEY: "not-a-token"}  # type: ignore[arg-type]  # NoBinding reads no scope


def _assert_incomplete(result: subprocess.CompletedProcess[str]) -> None:
    """Incomplete (exit 5): what needs a host identity was not exercised, and the run says how to unlock it."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.returncode == 5, output[-3000:]
    assert "VERDICT: incomplete" in result.stdout
    assert "engram-reference init DIR" in result.stdout and "spec/profile.md" in result.stdout


def test_the_reference_without_a_profile_ends_incomplete_and_names_what_a_profile_unlocks(reference: Path,
                                                                                          tmp_path: Path) -> None:
    command = shlex.join([*SERVE, "--config", str(reference / "server.toml")])
    # One era keeps the run short: what a missing profile skips is the same in both.
    result = conformance("--target", f"stdio:{command}", "--era", "legacy", "--report-dir", str(tmp_path))
    _assert_incomplete(result)
    assert "without a host binding the target lists no tool" in result.stdout
    assert "this target offers none of the six" not in result.stdout
    checks = [line for line in (tmp_path / "report.jsonl").read_text().splitlines() if '"type": "check"' in line]
    for ran in ("wiring.unbound-list-is-empty", "wiring.other-methods-unbound", "binding.untrusted-call"):
        assert any(f'"{ran}"' in c and '"PASS"' in c for c in checks), ran  # what needs no identity ran
    assert any(NEEDS_PROFILE in c for c in checks)
    assert (
        f"{NEEDS_PROFILE}: the check needs" in result.stdout
        and "→ pass --profile (`engram-reference init DIR`" in result.stdout
    )
    assert not any('"FAIL"' in c or '"ERROR"' in c for c in checks)


@pytest.mark.skipif(not SERVER_MEMORY.exists(), reason="run `npm ci --prefix tests/thirdparty` for server-memory")
def test_server_memory_without_a_profile_is_said_to_offer_none_of_the_six(tmp_path: Path) -> None:
    command = shlex.join(["env", f"MEMORY_FILE_PATH={tmp_path / 'memory.jsonl'}", "node", str(SERVER_MEMORY)])
    result = conformance("--target", f"stdio:{command}", "--era", "legacy", timeout=120)
    assert "Traceback" not in result.stdout + result.stderr
    assert "this target offers none of the six Engram memory tools (it lists " in result.stdout
    assert "VERDICT: conformant" not in result.stdout and result.returncode != 0


# -- a profile the target refuses -------------------------------------------------------


def test_a_profile_with_a_wrong_audience_ends_exit_3_blaming_the_profile(reference: Path, tmp_path: Path) -> None:
    path = _profile(reference, tmp_path, 'audience = "engram-reference-profile"=>audience = "someone-else"')
    command = shlex.join([*SERVE, "--config", str(reference / "server.toml")])
    result = conformance("--target", f"stdio:{command}", "--profile", str(path), "--era", "legacy",
                         "--report-dir", str(tmp_path / "r"))
    assert result.returncode == 3, result.stdout[-3000:]
    assert ("the target refuses this profile's binding — check audience, issuer, key id, trusted key"
            in result.stdout)
    assert "FAIL EMC-" not in result.stdout and "Traceback" not in result.stdout + result.stderr


# -- diagnoses of a target that cannot be reached ------------------------------------------


def _open(target: str, timeout: float = 30.0, headers: dict[str, str] | None = None) -> str:
    conn = Connection(parse_target(target, headers=headers), "legacy", ElicitationConfirmer(), timeout=timeout)
    try:
        with pytest.raises(TargetUnreachable) as failed:
            conn.open()
    finally:
        conn.close()
    return str(failed.value)


def test_a_target_that_exits_shows_the_tail_of_its_stderr() -> None:
    script = "import sys; sys.stderr.write('loading config\\nfatal: /etc/engram.toml not found\\n'); sys.exit(3)"
    message = _open("stdio:" + shlex.join([sys.executable, "-c", script]))
    assert message.startswith("the target closed the connection before answering initialize")
    assert "the target's stderr ends with:\n    loading config\n    fatal: /etc/engram.toml not found" in message


def test_the_cli_shows_the_stderr_of_a_target_that_exits(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('fatal: no store configured\\n'); sys.exit(3)"
    result = conformance("--target", "stdio:" + shlex.join([sys.executable, "-c", script]), timeout=120)
    assert result.returncode == 3, result.stdout[-2000:]
    assert "TARGET UNREACHABLE: the target closed the connection before answering initialize" in result.stdout
    assert "fatal: no store configured" in result.stdout
    assert "refused initialize" not in result.stdout and "Traceback" not in result.stdout + result.stderr


def test_a_target_that_never_answers_is_said_to_hang() -> None:
    script = "import time; time.sleep(120)"
    message = _open("stdio:" + shlex.join([sys.executable, "-c", script]), timeout=1)
    assert message.startswith("the target did not answer initialize within 1 s")


def test_a_command_that_does_not_exist_is_named() -> None:
    assert _open("stdio:/nonexistent/engram-server") == (
        "the target command cannot be started: /nonexistent/engram-server: no such command")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_reference(reference: Path, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    with open(tmp_path / "server.log", "w") as log:
        process = subprocess.Popen([*SERVE, "--config", str(reference / "server.toml"), "--http", f"127.0.0.1:{port}"],
                                   stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"the reference server exited: {(tmp_path / 'server.log').read_text()[-2000:]}")
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_http_without_the_bearer_token_names_the_profile_key(http_reference: str) -> None:
    assert _open(http_reference) == "HTTP 401: the target wants a bearer token (profile key `http.bearer_token_file`)"
    assert _open(http_reference, headers={"Authorization": "Bearer wrong"}).startswith(
        "HTTP 401: the target refused the bearer token")


def test_http_without_the_bearer_token_through_the_cli(http_reference: str) -> None:
    result = conformance("--target", http_reference, timeout=120)
    assert result.returncode == 3, result.stdout[-2000:]
    assert "HTTP 401: the target wants a bearer token (profile key `http.bearer_token_file`)" in result.stdout
    assert "-32603" not in result.stdout


def test_nothing_listening_is_said_plainly() -> None:
    message = _open(f"http://127.0.0.1:{_free_port()}/mcp", timeout=5)
    assert message.startswith("cannot reach http://127.0.0.1:")


def test_exception_groups_are_unwrapped_to_their_causes() -> None:
    inner = TimeoutError()
    group = BaseExceptionGroup("outer", [ExceptionGroup("inner", [inner]), KeyError("k")])
    assert leaf_exceptions(group)[0] is inner and len(leaf_exceptions(group)) == 2


def test_a_harness_error_names_the_cause_inside_an_exception_group() -> None:
    from engram_mcp.conformance._checks import Status
    from engram_mcp.conformance._plugin import _status

    def fail() -> None:
        raise ExceptionGroup("unhandled errors in a TaskGroup", [ConnectionResetError("the peer reset the stream")])

    status, message = _status(pytest.CallInfo.from_call(fail, "call"), None, "envelope.shape", None,  # type: ignore[arg-type]  # no run: an ERROR skips its baseline
                              ("EMC-ENV-002",))
    assert status is Status.ERROR
    assert message == "ConnectionResetError in the harness: the peer reset the stream"


def test_a_target_that_writes_a_banner_on_stdout_is_told_apart_from_a_silent_one() -> None:
    script = "import time; print('engram server v1 ready', flush=True); time.sleep(120)"
    message = _open("stdio:" + shlex.join([sys.executable, "-c", script]), timeout=1)
    assert message.startswith("the target wrote text that is not MCP on its protocol channel (stdout) "
                              "and did not answer initialize within 1 s")


def test_a_wrong_http_path_is_named(http_reference: str, reference: Path) -> None:
    wrong = http_reference.replace("/mcp", "/nowhere")
    bearer = (reference / "keys" / "http-bearer.txt").read_text(encoding="utf-8").strip()
    assert _open(wrong, headers={"Authorization": f"Bearer {bearer}"}) == (
        f"HTTP 404: no MCP endpoint at {wrong} (is the path right?)")


def test_a_minimal_profile_takes_its_defaults_from_the_schema(reference: Path, tmp_path: Path) -> None:
    path = reference / f"minimal-{tmp_path.name}.toml"
    path.write_text('[target]\naudience = "a"\n[binding]\nkid = "k"\nprivate_key_file = "keys/host.key.pem"\n'
                    '[[scopes]]\ntenant = "t"\nworkspace = "w"\n', encoding="utf-8")
    profile = load_profile(path)
    scope_schema = SCHEMA["$defs"]["scope"]["properties"]
    (scope,) = profile.scopes
    assert scope.memory is scope_schema["memory"]["default"] is False
    assert scope.admission_policy == scope_schema["admission_policy"]["default"]
    assert scope.confirmation_ttl_seconds == load().limit("confirmation.ttl.max")
    assert profile.purpose_ref == SCHEMA["properties"]["binding"]["properties"]["purpose_ref"]["default"]
    host, _ = host_from_profile(profile)
    assert host.issuer == SCHEMA["properties"]["binding"]["properties"]["issuer"]["default"]  # type: ignore[attr-defined]  # SignedMetaBinding's, not HostBinding's


def test_the_example_on_the_profile_page_is_valid() -> None:
    page = load().text("spec", "profile.md")
    (example,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert validate_profile_data(tomllib.loads(example), example, "spec/profile.md") == []


DIES_ON_CALL = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "dies-on-call", "version": "1"}}
    elif msg.get("method") == "tools/list":
        result = {"tools": []}
    elif msg.get("method") == "tools/call":
        sys.stderr.write("panic: index out of range in the call handler\\n")
        sys.exit(70)
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_a_target_that_dies_during_the_run_blocks_the_rest_with_its_last_words(tmp_path: Path) -> None:
    script = tmp_path / "dies_on_call.py"
    script.write_text(DIES_ON_CALL, encoding="utf-8")
    result = conformance("--target", "stdio:" + shlex.join([sys.executable, str(script)]), "--era", "legacy",
                         "--report-dir", str(tmp_path / "r"), timeout=300)
    assert "Traceback" not in result.stdout + result.stderr
    assert ("the target closed the connection after the opening exchange in the legacy era (its process exited, "
            "or closed its output)\n  the target's stderr ends with:\n    panic: index out of range in the call handler"
            in result.stdout)
    reports = [line for line in (tmp_path / "r" / "report.jsonl").read_text().splitlines() if '"type": "check"' in line]
    blocked = [line for line in reports if '"BLOCKED"' in line]
    assert blocked and all("the target closed the connection after the opening exchange" in line for line in blocked)


def test_a_profile_with_only_http_settings_reaches_the_target_without_a_host_identity(
        http_reference: str, reference: Path, tmp_path: Path) -> None:
    transport = reference / f"transport-{tmp_path.name}.toml"
    transport.write_text('[http]\nbearer_token_file = "keys/http-bearer.txt"\n', encoding="utf-8")
    assert not load_profile(transport).given and load_profile(transport).http_headers["Authorization"].startswith(
        "Bearer "
    )
    result = conformance("--target", http_reference, "--profile", str(transport), "--era", "legacy",
                         "--report-dir", str(tmp_path / "r"))
    _assert_incomplete(result)
    assert "without a host binding the target lists no tool" in result.stdout
    checks = [line for line in (tmp_path / "r" / "report.jsonl").read_text().splitlines() if '"type": "check"' in line]
    assert any('"wiring.http-bearer"' in c and '"PASS"' in c for c in checks)


def test_binding_target_and_scopes_come_together(tmp_path: Path) -> None:
    path = tmp_path / "half.toml"
    path.write_text('[[scopes]]\ntenant = "t"\nworkspace = "w"\n', encoding="utf-8")
    assert f"{path}: binding: required key is missing (a profile with [scopes] needs it)" in _refusal(path)


# -- [confirmation]: the modes the harness tests ----------------------------------------------------------


def test_the_generated_profile_declares_both_confirmation_modes(reference: Path) -> None:
    profile = load_profile(reference / "conformance-profile.toml")
    assert profile.confirmation_modes == {"host-reference", "server-initiated"}
    assert profile.reference_ttl_seconds == load().limit("confirmation.ttl.max")
    assert references_from_profile(profile) is not None


def test_a_profile_without_confirmation_means_server_initiated_only(reference: Path, tmp_path: Path) -> None:
    text = (reference / "conformance-profile.toml").read_text(encoding="utf-8")
    start = text.index("[confirmation]")
    path = reference / f"no-confirmation-{tmp_path.name}.toml"
    path.write_text(text[:start] + text[text.index("[[scopes]]", start):], encoding="utf-8")
    profile = load_profile(path)
    assert profile.confirmation_modes == {"server-initiated"}
    assert references_from_profile(profile) is None
    assert Profile.absent().confirmation_modes == {"server-initiated"}
