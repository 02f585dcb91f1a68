"""The preflight: before any check, the target must start, open a session in each era and accept the binding.

A target that cannot be reached, or refuses the profile's binding, is said so
once, instead of every check being blocked in turn.
"""

from __future__ import annotations

import threading
from typing import Any

from engram_mcp.conformance._connect import Connection, EraUnsupported, TargetUnreachable
from engram_mcp.conformance._profile import ScopeProfile
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
        _judge_the_host(run)
    lost = next((conn for conn in run.connections.values() if conn.lost), None)
    if not run.unreachable and lost is not None:  # it died on the preflight's first requests
        run.unreachable, run.profile_refused = lost.lost_reason(), False


def _judge_the_host(run: Run) -> None:
    """With a profile: the binding accepted, the tools served learnt, the grants fitting; without: what an unbound
    client sees."""
    if not run.profile.given:
        run.served = dict.fromkeys(load().tools, None)
        run.served_how = dict.fromkeys(load().tools, UNKNOWN_WITHOUT_PROFILE)
        run.notes.extend(_unbound_discovery(run))
        return
    run.unreachable = _binding_refused(run)
    if run.unreachable is None:
        learn_served(run)
        run.unreachable = _grants_differ(run)
    run.profile_refused = run.unreachable is not None


BINDING_REFUSED = ("the target refuses this profile's binding — check audience, issuer, key id, trusted key "
                   "(profile keys target.audience, binding.issuer, binding.kid, binding.private_key_file; "
                   "the target must trust the public half of that key under that key id)")
HOW_TO_PROFILE = ("a conformance profile (--profile FILE) unlocks the checks that need a host identity: signed "
                  "bindings, discovery per principal, and every call of the six tools. `engram-reference init DIR` "
                  "writes an example (DIR/conformance-profile.toml); spec/profile.md documents every key")


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
    scope = run.profile.scope_for() or next(iter(run.profile.scopes), None)
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


GRANTS_DIFFER = ("the profile's grants are not the target's: for each principal below the target lists exactly "
                 "the tools it serves, and they are not the ones the profile grants — correct the "
                 "[scopes.principals] table of scope {scope} in the profile (or the target's configuration)")


def _grants_differ(run: Run) -> str | None:
    """The primary scope's grants as the profile states them against the target's, judged once before any check.

    A listing that differs from the profile's grants is the profile's mistake only when the target shows it acts
    on grants: what it lists depends on the caller (two principals, or a principal and an unbound client, see
    different tools), every differing tool it lists is served, and every one it leaves out is refused as unknown.
    Each differing tool is called with no arguments, which a served tool refuses as invalid and nothing records.
    A target that lists the same tools to everyone, or contradicts its own listing, is left to the checks
    (discovery.granted-tools and the binding checks judge those defects).
    """
    scope = run.profile.scope_for()
    if scope is None or not run.connections:
        return None
    contract = load()
    conn = next(iter(run.connections.values()))
    listings: dict[str, list[str]] = {}
    for principal in sorted(scope.principals):
        reply = conn.list_tools(run.host.meta(scope, principal))
        if reply.kind != "result":
            return None
        listings[principal] = [name for name in _names(reply) if name in contract.tools]
    unbound = [name for name in _names(conn.list_tools(None)) if name in contract.tools]
    if len({tuple(names) for names in [*listings.values(), unbound]}) < 2:
        return None  # the same listing for every caller: no sign that the target reads grants at all
    unknown_tool = contract.protocol_errors["unknown_tool"].jsonrpc_code
    differences = []
    for principal, listed in listings.items():
        granted = sorted(scope.principals[principal])
        if listed == granted:
            continue
        for tool in sorted(set(listed) ^ set(granted)):
            called = conn.call(tool, {}, run.host.meta(scope, principal), answer="decline")
            refused_as_unknown = called.kind == "error" and called.code == unknown_tool
            if called.kind == "timeout" or refused_as_unknown == (tool in listed):
                return None
        differences.append(f"  {principal}: the profile grants [{', '.join(granted)}]; "
                           f"the target lists and serves [{', '.join(listed)}]")
    return "\n".join([GRANTS_DIFFER.format(scope=scope.label), *differences]) if differences else None


UNKNOWN_WITHOUT_PROFILE = "not known: without a conformance profile the harness has no principal to ask with"
NOT_GRANTED = "not granted: the profile grants it to no principal of a scope with memory on"


def learn_served(run: Run) -> None:
    """Which of the six tools the target serves, asked once before any check (in the first era spoken).

    A tool is served when the target lists it to some principal of the profile; a tool the profile grants but the
    target lists to no one is called with no arguments under a granted principal (a served tool refuses them as
    invalid; nothing is stored): answered as an unknown tool (-32602), or with an error result that carries no
    envelope (an SDK's registry answering a name it does not have), it is not served; answered otherwise, it is
    not known. A tool the profile grants to no principal cannot be told apart, from outside, from one the target
    does not have (the contract makes them alike): it is "not granted". The checks that need a tool that is not
    served, or not granted, are not exercised, each saying so; the grants the profile states for a tool the
    target does not serve are dropped for the rest of the run (what the model expects of a call of it is then
    the unknown-tool error, as of any tool not granted)."""
    conn = next(iter(run.connections.values()))
    scopes = [s for s in run.profile.scopes if s.memory and s.principals]
    listed = _listed(run, conn, scopes)
    for tool in load().tools:
        holder = next(((s, p) for s in scopes for p in sorted(s.principals) if tool in s.principals[p]), None)
        if tool in listed:
            run.served[tool], run.served_how[tool] = True, listed[tool]
        elif holder is None:
            run.served[tool], run.served_how[tool] = None, NOT_GRANTED
        else:
            run.served[tool], run.served_how[tool] = _probed(run, conn, tool, *holder)
    dropped = frozenset(tool for tool, served in run.served.items() if served is False)
    if dropped:
        run.profile = run.profile.without(dropped)
        if run.tracker is not None:
            run.tracker.narrow(run.profile)


def _listed(run: Run, conn: Connection, scopes: list[ScopeProfile]) -> dict[str, str]:
    """tool -> where it is listed, asking the principals with the most grants first, until all six are found."""
    tools = load().tools
    listed: dict[str, str] = {}
    for scope in scopes:
        for principal in sorted(scope.principals, key=lambda p: (-len(scope.principals[p]), p)):
            if set(tools) <= listed.keys():
                return listed
            for name in _names(conn.list_tools(run.host.meta(scope, principal))):
                if name in tools:
                    listed.setdefault(name, f"listed to {principal} in {scope.label}")
    return listed


def _probed(run: Run, conn: Connection, tool: str, scope: ScopeProfile, principal: str) -> tuple[bool | None, str]:
    """Whether a tool listed to no one is served, from a call of it with no arguments, and how that was learnt."""
    unknown = load().protocol_errors["unknown_tool"].jsonrpc_code
    reply = conn.call(tool, {}, run.host.meta(scope, principal), answer="decline", judged=False)
    said = reply.said()
    no_envelope = reply.kind == "result" and not isinstance(reply.envelope, dict)
    # A refused binding (-32603) says nothing of the tool: it stays "not known", so that the checks run and fail
    # on the requirement the refusal breaks, instead of dropping the grant and hiding it.
    if (reply.kind == "error" and reply.code == unknown) or (no_envelope and (reply.result or {}).get("isError")):
        return False, (f"not served: listed to no principal, and a call of it by {principal} in {scope.label} was "
                       f"answered {said}")
    if reply.kind == "result":
        return True, f"served though listed to no principal: a call of it was answered {said}"
    return None, f"not known: a call of it was answered {said}"


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
            notes.append(f"{era} era: tools/list without a binding was answered {reply.said()}")
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
