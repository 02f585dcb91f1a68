"""A host wired differently, both sides of it: the binding rides in ``_meta`` under a key of its own, as an object.

Server side (run as a script): a stdio wrapper in front of any stdio server
that expects the host wiring's wiring. For every message from the client it
drops the profile's binding key (this server must not trust it) and moves
``_meta["org.example/host-context"]["binding"]`` there; everything else passes
byte for byte, both ways.

    python tests/hosts/nested_meta.py -- SERVER_COMMAND...

Harness side: ``NestedMetaBinding``, the host adapter for such a server (the
same signed tokens, and the same forgeries, carried where the server looks),
and ``factory``, which tests/conformance/test_host_adapters.py declares under
the ``engram_mcp.host_adapters`` entry-point group as the kind ``nested-meta``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, Any

from engram_mcp.conformance.hosts import (
    Confirmer,
    ElicitationConfirmer,
    Forgery,
    HostBinding,
    Profile,
    ScopeProfile,
    SignedMetaBinding,
)
from engram_mcp.contract.binding import HOST_BINDING_META_KEY

CONTEXT_KEY = "org.example/host-context"
KIND = "nested-meta"


# -- server side ------------------------------------------------------------------------------------------------


def moved(message: Any) -> Any:
    """The message with the binding taken from this server's place to the profile's; None if nothing changes."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or not ({HOST_BINDING_META_KEY, CONTEXT_KEY} & meta.keys()):
        return None
    meta.pop(HOST_BINDING_META_KEY, None)
    context = meta.pop(CONTEXT_KEY, None)
    if context is not None:
        # Anything but an object with a string is passed on as a token no one can verify.
        token = context.get("binding") if isinstance(context, dict) else None
        meta[HOST_BINDING_META_KEY] = token if isinstance(token, str) else json.dumps(context)
    return message


def _client_to_server(source: IO[bytes], sink: IO[bytes]) -> None:
    for line in source:
        try:
            rewritten = moved(json.loads(line))
        except ValueError:  # not JSON (the harness sends such lines on purpose): the server judges it
            rewritten = None
        sink.write(line if rewritten is None else json.dumps(rewritten).encode() + b"\n")
        sink.flush()
    sink.close()


def _server_to_client(source: IO[bytes], sink: IO[bytes]) -> None:
    while chunk := os.read(source.fileno(), 65536):  # whatever has arrived, so replies are not held back
        sink.write(chunk)
        sink.flush()


def serve(command: list[str]) -> int:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    replies = threading.Thread(target=_server_to_client, args=(server.stdout, sys.stdout.buffer), daemon=True)
    replies.start()
    _client_to_server(sys.stdin.buffer, server.stdin)
    code = server.wait()
    replies.join(timeout=5)
    return code


# -- harness side -----------------------------------------------------------------------------------------------


class NestedMetaBinding:
    """The host wiring's signed tokens and forgeries, carried under ``CONTEXT_KEY`` as ``{"binding": token}``."""

    def __init__(self, signed: SignedMetaBinding) -> None:
        self.signed = signed
        self.forgeries = signed.forgeries

    @staticmethod
    def _carried(meta: dict[str, Any]) -> dict[str, Any]:
        return {CONTEXT_KEY: {"binding": meta[HOST_BINDING_META_KEY]}} if HOST_BINDING_META_KEY in meta else {}

    def meta(self, scope: ScopeProfile, principal: str, *, purpose: str | None = None, session: str = "conformance",
             audit_id: str | None = None, deadline: float | None = None) -> dict[str, Any]:
        return self._carried(self.signed.meta(scope, principal, purpose=purpose, session=session,
                                              audit_id=audit_id, deadline=deadline))

    def audit_id_of(self, meta: Mapping[str, Any]) -> str | None:
        carried = meta.get(CONTEXT_KEY)
        token = carried.get("binding") if isinstance(carried, Mapping) else None
        return self.signed.audit_id_of({HOST_BINDING_META_KEY: token})

    def forged(self, forgery: Forgery, scope: ScopeProfile, principal: str) -> dict[str, Any]:
        return self._carried(self.signed.forged(forgery, scope, principal))


def factory(profile: Profile) -> tuple[HostBinding, Confirmer]:
    """The entry point: the adapter pair for a profile whose ``binding.kind`` is ``nested-meta``."""
    return NestedMetaBinding(SignedMetaBinding.from_profile(profile)), ElicitationConfirmer()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not arguments:
        sys.exit("usage: nested_meta.py -- SERVER_COMMAND...")
    sys.exit(serve(arguments))
