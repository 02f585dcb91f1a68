"""The preflight: before any check, the target must start, open a session in each era and accept the binding.

A target that cannot be reached, or refuses the profile's binding, is said so
once, instead of every check being blocked in turn.
"""

from __future__ import annotations

import threading
from typing import Any

from engram_mcp.conformance._connect import Connection, EraUnsupported, TargetUnreachable
from engram_mcp.conformance._run import Run, ServerInfo, as_era
from engram_mcp.contract import load


def _answered(handshake: Any) -> bool:
    return not isinstance(handshake, (TargetUnreachable, EraUnsupported))


def preflight(run: Run) -> None:
    """The target starts and completes the opening exchange in every selected era.

    Fills the run's connections, the server's identity per era, the eras it
    refuses and, when nothing can be judged, ``run.unreachable`` with why.
    The eras open side by side (a target may take seconds to start); what
    each one said is then judged in era order.
    """
    opened = _open_side_by_side(run)
    for era in run.eras:
        conn, handshake = opened[era]
        if isinstance(handshake, EraUnsupported):
            run.unsupported_eras[era] = str(handshake)
            conn.close()
            continue
        if isinstance(handshake, TargetUnreachable):
            # The message carries the cause and the tail of the target's stderr (_connect.Connection._diagnose).
            conn.close()
            if any(_answered(h) for _, h in opened.values()):  # another era works: this era only fails, with why
                run.unsupported_eras[era] = str(handshake)
                continue
            failed = [each for each in run.eras if isinstance(opened[each][1], TargetUnreachable)]
            first, _, rest = str(handshake).partition("\n")
            run.unreachable = f"{first} [{' and '.join(failed)} era{'s' if len(failed) > 1 else ''}]" + (
                f"\n{rest}" if rest else "")
            break
        run.connections[era] = conn
        info = ServerInfo.from_handshake(era, handshake)
        if info is not None:
            run.server_info[era] = info
    for each, (conn, _) in opened.items():
        if run.connections.get(each) is not conn:
            conn.close()  # refused, or never judged after an unreachable era: closing twice is harmless
    if not run.unreachable and not run.connections:
        run.unreachable = "the target speaks none of the selected protocol eras: " + "; ".join(
            f"{era}: {why}" for era, why in run.unsupported_eras.items())
    if not run.unreachable:
        if run.profile.given:
            run.unreachable = _binding_refused(run)
            run.profile_refused = run.unreachable is not None
        else:
            run.notes.extend(_unbound_discovery(run))
    lost = next((conn for conn in run.connections.values() if conn.lost), None)
    if not run.unreachable and lost is not None:  # it died on the preflight's first requests
        run.unreachable, run.profile_refused = lost.lost_reason(), False


BINDING_REFUSED = ("the target refuses this profile's binding — check audience, issuer, key id, trusted key "
                   "(profile keys target.audience, binding.issuer, binding.kid, binding.private_key_file; "
                   "the target must trust the public half of that key under that key id)")
HOW_TO_PROFILE = ("a host profile (--profile FILE) unlocks the checks that need a host identity: signed bindings, "
                  "discovery per principal, and every call of the six tools. `engram-reference init DIR` writes an "
                  "example (DIR/conformance-profile.toml); spec/profile.md documents every key")


Opening = tuple[Connection, "dict[str, Any] | EraUnsupported | TargetUnreachable"]


def _open_side_by_side(run: Run) -> dict[str, Opening]:
    """Every era's connection with its handshake, or the refusal that stopped it."""
    opened: dict[str, Opening] = {}
    crashed: list[BaseException] = []

    def open_era(era: str) -> None:
        conn = Connection(run.target, as_era(era), run.confirmer, timeout=run.timeout, tracker=run.tracker)
        try:
            opened[era] = (conn, conn.open())
        except (EraUnsupported, TargetUnreachable) as refusal:
            opened[era] = (conn, refusal)
        except BaseException as problem:  # a harness fault: raised again below, in the run's own thread
            conn.close()
            crashed.append(problem)

    threads = [threading.Thread(target=open_era, args=(era,), name=f"preflight-{era}") for era in run.eras]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if crashed:
        for conn, _ in opened.values():
            conn.close()
        raise crashed[0]
    return opened


def _binding_refused(run: Run) -> str | None:
    """One harmless bound call (tools/list) per era: a target that refuses it with the trusted-context
    error while it answers the unbound one does not accept the profile's binding, and every later
    verdict would blame the target for the profile's mistake."""
    scope = run.profile.primary or next(iter(run.profile.scopes), None)
    if scope is None:
        return None
    principal = min(scope.principals, default="conformance-agent")
    untrusted = load().protocol_errors["trusted_context_unavailable"].jsonrpc_code
    refused = []
    listings: dict[str, list[list[str]]] = {}
    for era, conn in run.connections.items():
        bound = conn.list_tools(run.host.meta(scope, principal))
        unbound = conn.list_tools(None)
        refused.append(bound.kind == "error" and bound.code == untrusted and unbound.kind == "result")
        listings[era] = [_names(bound), _names(unbound)]
    run.not_engram = _no_memory_tool(listings)
    return BINDING_REFUSED if refused and all(refused) else None


def _names(reply: Any) -> list[str]:
    if reply.kind != "result":
        return []
    return sorted(str(t.get("name")) for t in (reply.result or {}).get("tools", []) if isinstance(t, dict))


def _no_memory_tool(listings: dict[str, list[list[str]]]) -> str | None:
    """Why the target is no Engram memory server: every era it speaks lists tools, and no listing (bound or not)
    holds any of the six. An empty listing proves nothing (memory may be off for the scope), so it never counts."""
    six = set(load().tools)
    if not listings or not all(any(lists) for lists in listings.values()):
        return None
    if any(set(names) & six for lists in listings.values() for names in lists):
        return None
    names = sorted({name for lists in listings.values() for names in lists for name in names})
    shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    return (f"this target offers none of the six Engram memory tools in any era it speaks; it lists "
            f"{len(names)} other tool{'s' if len(names) != 1 else ''} ({shown})")


def _unbound_discovery(run: Run) -> list[str]:
    """Without a profile: what the target offers a client that has no host identity, said plainly."""
    six = set(load().tools)
    notes = []
    listings: dict[str, list[list[str]]] = {}
    for era, conn in run.connections.items():
        reply = conn.list_tools(None)
        listings[era] = [_names(reply)]
        if reply.kind != "result":
            notes.append(f"{era} era: tools/list without a binding was answered {reply.kind} {reply.code!r}")
            continue
        names = listings[era][0]
        offered = [n for n in names if n in six]
        if not names:
            notes.append(f"{era} era: without a host binding the target lists no tool (memory is off by default); "
                         "a profile shows which of the six Engram memory tools it offers")
        elif not offered:
            shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
            notes.append(f"{era} era: this target offers none of the six Engram memory tools "
                         f"(it lists {len(names)} other tool{'s' if len(names) != 1 else ''}: {shown})")
        else:
            notes.append(f"{era} era: without a host binding the target lists {len(offered)} of the six Engram "
                         f"memory tools: {', '.join(offered)}")
    run.not_engram = _no_memory_tool(listings)
    if run.not_engram is None:  # a profile cannot make a target offer tools it does not have
        notes.append(HOW_TO_PROFILE)
    return notes
