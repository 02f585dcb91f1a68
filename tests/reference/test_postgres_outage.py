"""A PostgreSQL outage, over the real stdio server: calls are answered within the configured bound with a
retriable envelope, and served again within a second or two of the database's return.

The database is reached through a TCP relay on the loopback (tests/tcp_proxy.py) that the test cuts and
restores, as a database that went away and came back would look to the server. Skipped with the reason when
PostgreSQL does not answer.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest

from engram_mcp.contract import load
from tests.postgres_support import fresh_postgres_url
from tests.reference.conftest import McpClient, search_args, stdio_client_for
from tests.tcp_proxy import TcpRelay

__all__ = ["fresh_postgres_url"]  # the fixture, imported for pytest to find

pytestmark = pytest.mark.anyio

BOUND = 1  # [store] unavailable_after_seconds for the test
# What a call may take at most during the outage: the count, the operation and the audit row each wait for
# a connection, the first at most BOUND and the later ones half a second; the rest is slack for a busy machine.
ANSWERED_WITHIN = 8.0
BACK_WITHIN = 4.0  # seconds from the database's return to the first call served again (steady retries: 0.25 s)


def relayed(url: str, relay: TcpRelay) -> str:
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{relay.port}"))


async def timed_search(client: McpClient) -> tuple[float, str | None]:
    start = time.monotonic()
    result = await client.call("engram_memory_search", search_args("outage"), timeout=120)
    return time.monotonic() - start, result.code


async def test_an_outage_is_answered_within_the_bound_and_the_return_is_seen_at_once(
    make_reference_dir: Any, fresh_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = urlsplit(fresh_postgres_url)
    with TcpRelay(target.hostname or "127.0.0.1", target.port or 5432) as relay:
        ref = make_reference_dir()
        url = relayed(fresh_postgres_url, relay)
        ref.edit(lambda data: data.update(store={"url": url, "unavailable_after_seconds": BOUND}))
        async with stdio_client_for(ref, "legacy") as client:
            assert (await timed_search(client))[1] is None
            relay.cut()
            waits = []
            for _ in range(2):  # the first call finds the database away, the next one knows it is
                elapsed, code = await timed_search(client)
                assert code is not None and load().errors[code].retriable, code
                assert elapsed < ANSWERED_WITHIN, f"a call waited {elapsed:.1f} s for a database that is away"
                waits.append(elapsed)
            await anyio.sleep(2)  # long enough for a doubling backoff to be past its first retries
            relay.restore()
            back = time.monotonic()
            while (await timed_search(client))[1] is not None:
                assert time.monotonic() - back < BACK_WITHIN, "the server did not see the database return"
                await anyio.sleep(0.1)
            served_after = time.monotonic() - back
    with capsys.disabled():
        print(f"\noutage: calls answered {code} after {waits[0]:.2f} s, then {waits[1]:.2f} s "
              f"(unavailable_after_seconds {BOUND}); served again {served_after:.2f} s after the database returned")
