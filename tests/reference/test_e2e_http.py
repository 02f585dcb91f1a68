"""Streamable HTTP: the bearer guard, DNS-rebinding protection, and a whole flow in each era.

One ``engram-reference serve --http`` process serves the module; it is stopped
when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from engram_mcp.contract.binding import CONFIRMATION_MESSAGES
from tests.reference.conftest import (
    ERAS,
    UNTRUSTED,
    HttpServer,
    ReferenceDir,
    admission_args,
    assert_protocol_error,
    capture_args,
    forget_args,
    get_args,
    http_client_for,
    http_server,
    marker,
    search_args,
)

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(reference_dir: ReferenceDir) -> Iterator[HttpServer]:
    with http_server(reference_dir) as running:
        yield running


def assert_unauthorized(response: httpx2.Response) -> None:
    assert response.status_code == 401
    assert response.headers.get("www-authenticate", "").startswith("Bearer")
    assert "jsonrpc" not in response.text, "refused before any MCP processing"


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong-token", "Basic dXNlcjpwYXNz", "BEARER-TOKEN"],
)
def test_a_missing_or_wrong_bearer_is_401(server: HttpServer, method: str, authorization: str | None) -> None:
    headers = dict(ACCEPT)
    if authorization is not None:
        headers["Authorization"] = authorization
    response = httpx2.request(
        method, server.url, headers=headers, json=INITIALIZE if method == "POST" else None, timeout=10
    )
    assert_unauthorized(response)


def test_a_near_miss_bearer_is_401(server: HttpServer) -> None:
    for token in (server.bearer[:-1], server.bearer + "x", server.bearer.upper(), f" {server.bearer}"):
        response = httpx2.post(
            server.url, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, json=INITIALIZE, timeout=10
        )
        assert_unauthorized(response)


def test_the_right_bearer_reaches_mcp(server: HttpServer) -> None:
    response = httpx2.post(
        server.url, headers={**ACCEPT, "Authorization": f"Bearer {server.bearer}"}, json=INITIALIZE, timeout=10
    )
    assert response.status_code == 200
    assert "jsonrpc" in response.text


def test_a_foreign_host_header_is_refused(server: HttpServer) -> None:
    """DNS-rebinding protection: a Host this server does not answer to gets 421, even with the bearer."""
    headers = {**ACCEPT, "Authorization": f"Bearer {server.bearer}", "Host": f"attacker.example:{server.port}"}
    response = httpx2.post(server.url, headers=headers, json=INITIALIZE, timeout=10)
    assert response.status_code == 421
    assert "jsonrpc" not in response.text


def test_a_foreign_origin_is_refused(server: HttpServer) -> None:
    headers = {**ACCEPT, "Authorization": f"Bearer {server.bearer}", "Origin": "http://attacker.example"}
    response = httpx2.post(server.url, headers=headers, json=INITIALIZE, timeout=10)
    assert response.status_code == 403
    assert "jsonrpc" not in response.text


@pytest.mark.parametrize("era", ERAS)
async def test_the_bearer_never_stands_in_for_the_binding(server: HttpServer, era: str) -> None:
    async with http_client_for(server, era) as client:
        assert (await client.list_tools(None)).tools == []
        error = await client.protocol_error("engram_memory_search", search_args("anything"), None)
        assert_protocol_error(error, UNTRUSTED)


@pytest.mark.parametrize("era", ERAS)
async def test_a_whole_flow_with_confirmation(server: HttpServer, era: str) -> None:
    async with http_client_for(server, era) as client:
        assert len((await client.list_tools(client.host.meta())).tools) == 6
        word = marker()
        capture = (await client.call("engram_memory_capture", capture_args(f"Over HTTP {word}."))).value
        assert capture["status"] == "committed_pending"
        outcome = (await client.call("engram_memory_request_admission", admission_args(capture["candidate_id"]))).value
        rid = outcome["outcome"]["record_id"]
        found = (await client.call("engram_memory_search", search_args(word))).value["records"]
        assert [entry["record"]["record_id"] for entry in found] == [rid]
        assert (await client.call("engram_memory_get", get_args(rid))).value["record"]["record_id"] == rid

        client.confirmer.mode = "decline"
        assert (await client.call("engram_memory_forget", forget_args(rid))).code == "gate_failed"
        assert (await client.call("engram_memory_get", get_args(rid))).ok
        client.confirmer.reset()
        forgotten = (await client.call("engram_memory_forget", forget_args(rid))).value
        assert forgotten["receipt"]["to_state"] == "tombstoned"
        assert (await client.call("engram_memory_get", get_args(rid))).code == "NOT_FOUND"
        assert (await client.call("engram_memory_search", search_args(word))).value["records"] == []
        assert [a["message"] for a in client.confirmer.asked] == [CONFIRMATION_MESSAGES["engram_memory_forget"]]

        # acme/ops gates the capture itself: asked over HTTP too.
        client.confirmer.reset()
        gated = await client.call("engram_memory_capture", capture_args(), workspace="ops")
        assert gated.value["status"] == "committed_pending"
        assert [a["message"] for a in client.confirmer.asked] == [CONFIRMATION_MESSAGES["engram_memory_capture"]]


def test_the_server_log_never_holds_a_bearer(server: HttpServer, reference_dir: ReferenceDir) -> None:
    """EMC-HP-023: neither the right bearer nor a wrong one presented to the server reaches its log."""
    wrong = "Bearer wrong-" + server.bearer[::-1]
    for authorization in (wrong, f"Bearer {server.bearer}"):
        httpx2.post(server.url, headers={**ACCEPT, "Authorization": authorization, "Host": "attacker.example"},
                    json=INITIALIZE, timeout=10)
    log = (reference_dir.path / "server-http-stderr.log").read_text(encoding="utf-8", errors="replace")
    assert "attacker.example" in log, "the refusal was logged, so the log is being written"
    assert server.bearer not in log and server.bearer[::-1] not in log
