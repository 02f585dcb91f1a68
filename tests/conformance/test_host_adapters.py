"""The host-adapter registry: a server wired differently is certified by adding an adapter, not by forking the suite.

tests/hosts/nested_meta.py is such a server (a wrapper that takes the binding
from ``_meta["org.example/host-context"]["binding"]`` and nowhere else, in
front of the reference) and its adapter. Declared under the
``engram_mcp.host_adapters`` entry-point group by a distribution on the path,
the adapter lets the real ``conformance`` command certify the wrapper; with the
built-in ``signed-meta`` adapter the same server fails, so the adapter is what
carries the binding.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from engram_mcp.conformance._host import SignedMetaBinding
from engram_mcp.conformance._profile import load_profile
from engram_mcp.conformance.hosts import (
    BUILT_IN_KIND,
    ENTRY_POINT_GROUP,
    ProfileError,
    adapter_for,
    host_from_profile,
    kinds,
    register,
    registered,
)
from engram_mcp.contract.binding import HOST_BINDING_META_KEY
from engram_mcp.reference.init import write_configuration

HOSTS = Path(__file__).resolve().parents[1] / "hosts"
WRAPPER = HOSTS / "nested_meta.py"
KIND = "nested-meta"
SELECT = ["binding.", "discovery.", "gate.approval-runs"]  # every check that binds calls through the host adapter
RUN_TIMEOUT = 300


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One reference configuration, with a second profile that names the other kind."""
    directory = tmp_path_factory.mktemp("hosts") / "ref"
    write_configuration(directory, seed="hosts")
    text = (directory / "conformance-profile.toml").read_text(encoding="utf-8")
    assert f'kind = "{BUILT_IN_KIND}"' in text
    (directory / "nested.toml").write_text(text.replace(f'kind = "{BUILT_IN_KIND}"', f'kind = "{KIND}"'),
                                           encoding="utf-8")
    return directory


def declare(site: Path, entries: dict[str, str]) -> Path:
    """A distribution on ``site`` whose entry points declare ``entries`` as host adapters."""
    info = site / "engram_test_hosts-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: engram-test-hosts\nVersion: 0.0.0\n", encoding="utf-8")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{name} = {value}" for name, value in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return site


@pytest.fixture
def wrapper(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HOSTS))
    return importlib.import_module("nested_meta")


# -- the registry ------------------------------------------------------------------------------------------------


def test_the_built_in_kind_is_always_there_and_cannot_be_replaced(configured: Path) -> None:
    assert BUILT_IN_KIND in kinds()
    binding, _ = host_from_profile(load_profile(configured / "conformance-profile.toml"))
    assert isinstance(binding, SignedMetaBinding)
    with pytest.raises(ValueError, match="built in"):
        register(BUILT_IN_KIND, adapter_for(BUILT_IN_KIND))


def test_an_unknown_kind_is_refused_with_the_kinds_there_are(configured: Path) -> None:
    profile = load_profile(configured / "nested.toml")  # the profile format accepts any kind
    with pytest.raises(ProfileError) as refused:
        host_from_profile(profile)
    message = str(refused.value)
    assert f"binding.kind {KIND!r} has no host adapter" in message and BUILT_IN_KIND in message
    assert ENTRY_POINT_GROUP in message


def test_a_registered_adapter_serves_its_kind_for_the_block_only(configured: Path, wrapper: ModuleType) -> None:
    profile = load_profile(configured / "nested.toml")
    with registered(KIND, wrapper.factory):
        assert KIND in kinds()
        binding, _ = host_from_profile(profile)
        assert isinstance(binding, wrapper.NestedMetaBinding)
    assert KIND not in kinds()
    with pytest.raises(ProfileError):
        host_from_profile(profile)


def test_an_entry_point_declares_an_adapter(configured: Path, wrapper: ModuleType, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(declare(tmp_path / "site", {KIND: "nested_meta:factory"})))
    assert KIND in kinds()
    assert adapter_for(KIND) is wrapper.factory
    binding, _ = host_from_profile(load_profile(configured / "nested.toml"))
    assert isinstance(binding, wrapper.NestedMetaBinding)


def test_a_broken_entry_point_is_named_without_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(declare(tmp_path / "site", {"broken": "engram_no_such_module:factory"})))
    with pytest.raises(ProfileError) as refused:
        adapter_for("broken")
    assert str(refused.value) == ("binding.kind 'broken': the host adapter engram_no_such_module:factory "
                                  "cannot be loaded (ModuleNotFoundError)")


def test_the_command_line_refuses_a_kind_nobody_serves_as_a_usage_error(configured: Path) -> None:
    command = [sys.executable, "-m", "engram_mcp.conformance", "--target", "reference", "--profile",
               str(configured / "nested.toml"), "--select", "discovery.granted-tools", "--era", "legacy"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"binding.kind {KIND!r} has no host adapter" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


# -- the second wiring -------------------------------------------------------------------------------------------


def test_the_adapter_carries_every_token_where_the_server_looks(configured: Path, wrapper: ModuleType) -> None:
    profile = load_profile(configured / "nested.toml")
    signed = SignedMetaBinding.from_profile(profile)
    binding = wrapper.NestedMetaBinding(signed)
    scope = profile.scope_for()
    assert scope is not None
    meta = binding.meta(scope, "agent-full")
    assert set(meta) == {wrapper.CONTEXT_KEY} and set(meta[wrapper.CONTEXT_KEY]) == {"binding"}
    assert binding.forgeries == signed.forgeries
    assert binding.forged("missing", scope, "agent-full") == {}
    assert binding.forged("garbage", scope, "agent-full") == {wrapper.CONTEXT_KEY: {"binding": "not-a-token"}}


CONTEXT = "org.example/host-context"


@pytest.mark.parametrize(("meta", "after"), [
    ({CONTEXT: {"binding": "t"}}, {HOST_BINDING_META_KEY: "t"}),
    ({HOST_BINDING_META_KEY: "t"}, {}),  # the profile's own place is not trusted by this server
    ({HOST_BINDING_META_KEY: "x", CONTEXT: {"binding": "t"}, "k": 1}, {HOST_BINDING_META_KEY: "t", "k": 1}),
    ({CONTEXT: "t"}, {HOST_BINDING_META_KEY: '"t"'}),  # malformed: passed on as a token no one can verify
])
def test_the_wrapper_moves_the_binding_and_drops_the_profiles_key(wrapper: ModuleType, meta: dict, after: dict) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "_meta": meta}}
    assert wrapper.moved(message)["params"]["_meta"] == after


def test_the_wrapper_leaves_other_messages_alone(wrapper: ModuleType) -> None:
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "ping"}, [1, 2], {"params": {"_meta": {"a": 1}}}, "text"):
        assert wrapper.moved(message) is None


# -- certified by the real command line ----------------------------------------------------------------------------


def certify(configured: Path, profile: str, era: str, report: Path, site: Path) -> tuple[int, Counter[str], set[str]]:
    """Run ``conformance`` against the wrapped reference; (exit code, status counts, failing check labels)."""
    serve = [sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(configured / "server.toml")]
    target = "stdio:" + " ".join([sys.executable, str(WRAPPER), "--", *serve])
    command = [sys.executable, "-m", "engram_mcp.conformance", "--target", target, "--profile",
               str(configured / profile), "--era", era, "--report-dir", str(report)]
    for prefix in SELECT:
        command += ["--select", prefix]
    env = {**os.environ, "PYTHONPATH": f"{site}:{HOSTS}"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    rows = [json.loads(line) for line in (report / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    checks = [row for row in rows if row.get("type") == "check"]
    failing = {row["label"] for row in checks if row["status"] not in ("PASS", "SKIP")}
    assert checks, result.stdout[-2000:] + result.stderr[-2000:]
    return result.returncode, Counter(row["status"] for row in checks), failing


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_TIMEOUT)
def test_the_harness_certifies_a_server_wired_otherwise_through_its_adapter(configured: Path, tmp_path: Path) -> None:
    site = declare(tmp_path / "site", {KIND: "nested_meta:factory"})
    code, statuses, failing = certify(configured, "nested.toml", "both", tmp_path / "with-adapter", site)
    # A partial run (--select) is incomplete at best: exit 5, with nothing but PASS and SKIP.
    assert code == 5 and not failing, (code, statuses, failing)
    assert statuses["PASS"] >= 40, statuses  # the forgeries and grants of both eras went through the adapter

    code, statuses, failing = certify(configured, "conformance-profile.toml", "legacy", tmp_path / "built-in", site)
    assert code == 1 and "discovery.granted-tools@legacy" in failing, (code, statuses, failing)
