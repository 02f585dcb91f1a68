"""Legacy-era HTTP sessions: bounded per principal and in total, the least recently used idle one giving way,
and closed after the configured idle minutes, against a real ``engram-reference serve --http`` process."""

from __future__ import annotations

import time
from typing import Any

import httpx2
import pytest

from tests.reference.conftest import HttpServer, http_server
from tests.reference.test_edge_http import INITIALIZE, headers
from tests.reference.test_edge_stdio import set_transport


def open_session(server: HttpServer, client: httpx2.Client) -> str:
    response = client.post(server.url, headers=headers(server), json=INITIALIZE)
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def alive(server: HttpServer, client: httpx2.Client, session: str) -> bool:
    """Whether the session still answers a ping (a closed one is 404, as the SDK answers an unknown id)."""
    response = client.post(server.url, headers={**headers(server), "mcp-session-id": session},
                           json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert response.status_code in (200, 404), response.text
    return response.status_code == 200


def bound_call(server: HttpServer, client: httpx2.Client, session: str, principal: str) -> None:
    """A tools/list carrying a binding for ``principal``: the session is that principal's from then on."""
    meta = server.ref.host.meta(principal=principal)
    response = client.post(server.url, headers={**headers(server), "mcp-session-id": session},
                           json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}})
    assert response.status_code == 200, response.text


def test_sessions_past_a_principals_bound_close_its_least_recently_used_idle_one(make_reference_dir: Any) -> None:
    ref = set_transport(make_reference_dir(), http_sessions_per_principal=3, http_max_sessions=20)
    with http_server(ref) as running, httpx2.Client(timeout=10) as client:
        unbound = [open_session(running, client) for _ in range(5)]  # never named a principal
        assert [alive(running, client, s) for s in unbound] == [False, False, True, True, True]
        mine = []
        for _ in range(3):
            mine.append(open_session(running, client))
            bound_call(running, client, mine[-1], "agent-full")
        assert alive(running, client, mine[0])  # used last among them now: mine[1] is the least recently used
        fourth = open_session(running, client)
        bound_call(running, client, fourth, "agent-full")
        assert [alive(running, client, s) for s in (*mine, fourth)] == [True, False, True, True]
        other = open_session(running, client)
        bound_call(running, client, other, "agent-limited")  # another principal's bound is its own
        assert alive(running, client, other) and alive(running, client, mine[2])


def test_at_the_total_bound_a_new_client_closes_the_least_recently_used_idle_session(make_reference_dir: Any) -> None:
    ref = set_transport(make_reference_dir(), http_sessions_per_principal=10, http_max_sessions=3)
    with http_server(ref) as running, httpx2.Client(timeout=10) as client:
        sessions = [open_session(running, client) for _ in range(3)]
        for principal, session in zip(("agent-full", "agent-limited", "agent-observer"), sessions, strict=True):
            bound_call(running, client, session, principal)
        newest = open_session(running, client)  # served, not 503
        assert [alive(running, client, s) for s in (*sessions, newest)] == [False, True, True, True]


def test_a_session_the_client_deletes_is_gone_and_the_server_logs_no_error(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    with http_server(ref) as running, httpx2.Client(timeout=10) as client:
        session = open_session(running, client)
        bound_call(running, client, session, "agent-full")
        deleted = client.delete(running.url, headers={**headers(running), "mcp-session-id": session})
        assert deleted.status_code == 200, deleted.text
        assert not alive(running, client, session)
        assert [alive(running, client, open_session(running, client)) for _ in range(2)] == [True, True]
    assert "Traceback" not in (ref.path / "server-http-stderr.log").read_text(encoding="utf-8")


def test_an_idle_session_is_closed_after_the_configured_minutes(make_reference_dir: Any) -> None:
    ref = set_transport(make_reference_dir(), http_session_idle_minutes=0.02)  # 1.2 s
    with http_server(ref) as running, httpx2.Client(timeout=10) as client:
        session, kept = open_session(running, client), open_session(running, client)
        assert alive(running, client, session)
        for _ in range(6):  # kept busy: a request every half second keeps it from being idle
            time.sleep(0.5)
            assert alive(running, client, kept)
        assert not alive(running, client, session), "the idle session was kept"


@pytest.mark.slow
def test_a_flood_of_sessions_never_refuses_a_new_client(make_reference_dir: Any) -> None:
    """10,050 sessions, past the SDK's own limit of 10,000 that answered every new client 503, with the defaults
    init writes: every initialize is answered 200, the oldest sessions giving way."""
    ref = make_reference_dir()
    with http_server(ref) as running, httpx2.Client(timeout=30) as client:
        statuses = [client.post(running.url, headers=headers(running), json=INITIALIZE).status_code
                    for _ in range(10_050)]
        assert statuses.count(200) == len(statuses), f"{len(statuses) - statuses.count(200)} refused"
