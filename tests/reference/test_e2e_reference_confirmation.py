"""Host-reference confirmation end to end (spec/host-wiring.md §2.3, §2.4, §2.9), over stdio in both eras.

The test host approves on its own and sends each gated call with a signed
reference; the server must judge the reference alone, never asking the
client. After every refusal the target is unchanged and the key still free.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jwt
import pytest

from engram_mcp.contract import load
from engram_mcp.contract.binding import CONFIRMATION_REF_META_KEY, generate_host_key, mint_confirmation_reference
from engram_mcp.reference._config import ConfigError, load_config
from tests.reference.conftest import (
    UNTRUSTED,
    McpClient,
    ReferenceDir,
    admitted,
    assert_protocol_error,
    capture_args,
    captured,
    forget_args,
    get_args,
    init_reference_dir,
    stdio_client_for,
    withdraw_args,
)

pytestmark = pytest.mark.anyio

CONTRACT = load()
WINDOW = CONTRACT.limit("confirmation.execute_within")
TTL_MAX = CONTRACT.limit("confirmation.ttl.max")
WITHDRAW, FORGET, CAPTURE = "engram_memory_withdraw", "engram_memory_forget", "engram_memory_capture"
OPS = {"workspace": "ops"}


def reference(ref: ReferenceDir, tool: str, arguments: dict[str, Any], *, workspace: str = "research",
              principal: str = "agent-full", **claims: Any) -> dict[str, Any]:
    """The binding and a reference for exactly this call, as the test host sends them."""
    host = ref.host
    token = mint_confirmation_reference(host.key, host.kid, audience=host.audience, issuer=host.issuer, tool=tool,
                                        arguments=arguments, tenant="acme", workspace=workspace, principal=principal,
                                        **claims)
    return {**host.meta(workspace=workspace, principal=principal), CONFIRMATION_REF_META_KEY: token}


async def runs(client: McpClient, ref: ReferenceDir, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """The call with a good reference runs as a first execution and asks nothing."""
    before = len(client.confirmer.asked)
    client.confirmer.mode = "decline"  # anything asked would be refused
    result = await client.call(tool, arguments, reference(ref, tool, arguments, **kw))
    assert len(client.confirmer.asked) == before, "the server asked although the call carried a reference"
    value = result.value
    assert value.get("replayed", False) is False
    return value


async def refused(client: McpClient, tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> None:
    before = len(client.confirmer.asked)
    client.confirmer.mode = "accept"  # an answer would approve: only the reference may decide
    assert (await client.call(tool, arguments, meta)).code == "gate_failed"
    assert len(client.confirmer.asked) == before, "the server asked although the call carried a reference"


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return init_reference_dir(tmp_path_factory.mktemp("reference-confirmation"))


# -- both eras, both modes served ------------------------------------------------------------


async def test_withdraw_and_forget_run_on_a_reference_without_asking(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    cid = (await captured(client))["candidate_id"]
    done = await runs(client, reference_dir, WITHDRAW, withdraw_args(cid))
    assert done["receipt"]["to_state"] == "withdrawn"
    _, rid = await admitted(client)
    assert (await runs(client, reference_dir, FORGET, forget_args(rid)))["receipt"]["to_state"] == "tombstoned"
    assert (await client.call("engram_memory_get", get_args(rid))).code == "NOT_FOUND"


async def test_a_policy_gated_capture_runs_on_its_reference(client: McpClient, reference_dir: ReferenceDir) -> None:
    arguments = capture_args()
    other = {**arguments, "idempotency_key": arguments["idempotency_key"] + "-other"}
    await refused(client, CAPTURE, arguments, reference(reference_dir, CAPTURE, other, workspace="ops"))
    assert (await runs(client, reference_dir, CAPTURE, arguments, workspace="ops"))["status"] == "committed_pending"


FLAWS = ["expired", "over_ceiling", "other_key", "binding_token", "other_target", "other_key_arguments",
         "other_capability", "other_principal", "stale", "future", "garbage"]


@pytest.mark.parametrize("flaw", FLAWS)
async def test_a_bad_reference_is_gate_failed_and_changes_nothing(client: McpClient, reference_dir: ReferenceDir,
                                                                  flaw: str) -> None:
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    ref = reference_dir
    meta: dict[str, Any]
    if flaw == "expired":
        meta = reference(ref, WITHDRAW, arguments, approved_at=time.time() - 20, lifetime=10)
    elif flaw == "over_ceiling":
        meta = reference(ref, WITHDRAW, arguments, lifetime=TTL_MAX + 1)
    elif flaw == "other_key":
        token = mint_confirmation_reference(generate_host_key()[0], ref.host.kid, audience=ref.host.audience,
                                            issuer=ref.host.issuer, tool=WITHDRAW, arguments=arguments, tenant="acme",
                                            workspace="research", principal="agent-full")
        meta = {**ref.host.meta(), CONFIRMATION_REF_META_KEY: token}
    elif flaw == "binding_token":
        meta = {**ref.host.meta(), CONFIRMATION_REF_META_KEY: ref.host.token()}
    elif flaw == "other_target":
        meta = reference(ref, WITHDRAW, withdraw_args((await captured(client))["candidate_id"]))
    elif flaw == "other_key_arguments":
        meta = reference(ref, WITHDRAW, {**arguments, "idempotency_key": arguments["idempotency_key"] + "-2"})
    elif flaw == "other_capability":
        meta = reference(ref, WITHDRAW, arguments, capability=FORGET)
    elif flaw == "other_principal":
        meta = {**ref.host.meta(), CONFIRMATION_REF_META_KEY:
                reference(ref, WITHDRAW, arguments, principal="agent-limited")[CONFIRMATION_REF_META_KEY]}
    elif flaw == "stale":
        meta = reference(ref, WITHDRAW, arguments, approved_at=time.time() - WINDOW - 1, lifetime=60)
    elif flaw == "future":
        meta = reference(ref, WITHDRAW, arguments, approved_at=time.time() + 30)
    else:
        meta = {**ref.host.meta(), CONFIRMATION_REF_META_KEY: "not-a-reference"}
    await refused(client, WITHDRAW, arguments, meta)
    assert (await runs(client, ref, WITHDRAW, arguments))["receipt"]["from_state"] == "pending"


async def test_an_approval_inside_the_window_runs(client: McpClient, reference_dir: ReferenceDir) -> None:
    cid = (await captured(client))["candidate_id"]
    await runs(client, reference_dir, WITHDRAW, withdraw_args(cid), approved_at=time.time() - WINDOW + 3, lifetime=60)


async def test_a_reference_is_used_once(client: McpClient, reference_dir: ReferenceDir) -> None:
    arguments = withdraw_args((await captured(client))["candidate_id"])
    meta = reference(reference_dir, WITHDRAW, arguments)
    client.confirmer.mode = "decline"
    assert (await client.call(WITHDRAW, arguments, meta)).value["replayed"] is False
    # The same call again is a replay, answered before the gate (EMC-HP-041).
    assert (await client.call(WITHDRAW, arguments, meta)).value["replayed"] is True
    second = withdraw_args((await captured(client))["candidate_id"])
    await refused(client, WITHDRAW, second, {**reference_dir.host.meta(), CONFIRMATION_REF_META_KEY:
                                             meta[CONFIRMATION_REF_META_KEY]})
    spent = jwt.decode(meta[CONFIRMATION_REF_META_KEY], options={"verify_signature": False})["jti"]
    await refused(client, WITHDRAW, second, reference(reference_dir, WITHDRAW, second, jti=spent))
    await runs(client, reference_dir, WITHDRAW, second)


async def test_no_reference_still_asks_when_the_client_can_answer(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    client.confirmer.reset()
    assert (await client.call(WITHDRAW, withdraw_args(cid))).value["replayed"] is False
    assert len(client.confirmer.asked) == 1


# -- a client that cannot be asked, and one mode only ----------------------------------------


@pytest.fixture(scope="module", params=["legacy", "modern"])
async def unasked(request: pytest.FixtureRequest, reference_dir: ReferenceDir) -> AsyncIterator[McpClient]:
    async with stdio_client_for(reference_dir, request.param, elicitation=False) as client:
        yield client


async def test_no_reference_and_no_way_to_ask_is_the_protocol_error(unasked: McpClient,
                                                                    reference_dir: ReferenceDir) -> None:
    cid = (await captured(unasked))["candidate_id"]
    arguments = withdraw_args(cid)
    assert_protocol_error(await unasked.protocol_error(WITHDRAW, arguments, reference_dir.host.meta()), UNTRUSTED)
    assert (await runs(unasked, reference_dir, WITHDRAW, arguments))["receipt"]["from_state"] == "pending"


@asynccontextmanager
async def serving_only(tmp_path_factory: pytest.TempPathFactory, mode: str, era: str) -> AsyncIterator[
        tuple[ReferenceDir, McpClient, dict[str, Any]]]:
    """A server configured with one confirmation mode: (its directory, a client, a withdraw's arguments)."""
    ref = init_reference_dir(tmp_path_factory.mktemp(mode))
    ref.edit(lambda data: data.update(confirmation={"modes": [mode]}))
    async with stdio_client_for(ref, era) as client:
        yield ref, client, withdraw_args((await captured(client))["candidate_id"])


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_host_reference_only_never_asks(tmp_path_factory: pytest.TempPathFactory, era: str) -> None:
    async with serving_only(tmp_path_factory, "host-reference", era) as (ref, client, arguments):
        assert_protocol_error(await client.protocol_error(WITHDRAW, arguments, ref.host.meta()), UNTRUSTED)
        assert client.confirmer.asked == []
        assert (await runs(client, ref, WITHDRAW, arguments))["receipt"]["from_state"] == "pending"


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_server_initiated_only_ignores_a_reference(tmp_path_factory: pytest.TempPathFactory, era: str) -> None:
    async with serving_only(tmp_path_factory, "server-initiated", era) as (ref, client, arguments):
        client.confirmer.mode = "decline"
        assert (await client.call(WITHDRAW, arguments, reference(ref, WITHDRAW, arguments))).code == "gate_failed"
        assert len(client.confirmer.asked) == 1, "the server-initiated mode asks whatever the call carries"


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("table", [
    {"modes": []}, {"modes": ["host-reference", "host-reference"]}, {"modes": ["telepathy"]}, {"modes": "both"},
    {"reference_ttl_seconds": 0}, {"reference_ttl_seconds": TTL_MAX + 1}, {"fallback": True},
])
def test_a_bad_confirmation_table_is_refused(tmp_path_factory: pytest.TempPathFactory, table: dict[str, Any]) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("bad-confirmation"))
    ref.edit(lambda data: data.update(confirmation=table))
    with pytest.raises(ConfigError, match="confirmation"):
        load_config(ref.config)


def test_init_serves_both_modes(reference_dir: ReferenceDir) -> None:
    config = load_config(reference_dir.config)
    assert config.confirmation.modes == {"host-reference", "server-initiated"}
    assert config.confirmation.reference_ttl_seconds == TTL_MAX

