"""Assembling a reference server: its configuration, its ports and the server itself.

The one public way to build and run the reference in a program of your own::

    from engram_mcp.reference.server import ReferenceServer, build_ports, load_config

    config = load_config("engram/server.toml")
    server = ReferenceServer(config, build_ports(config))  # or ServerPorts(store=…, cipher=…, policies=…)

    run_stdio(server)  # one MCP session over stdin/stdout; or serve http_app(server, host, port) with any ASGI server

``build_ports`` opens what the configuration names (the SQLite file, or PostgreSQL when ``[store] url``
says so); pass a ``ServerPorts`` of your own to run the same server on another store, cipher or
admission policy (the store's Protocols are in ``engram_mcp.reference.ports``). The ports of the
edge are here too, each with the default built from the configuration:

- ``host``: ``HostBinding``, the binding a request carries, verified (default ``SignedBindings``);
- ``grants``: ``Grants``, a principal's tools and capture authority in a scope (default: the configuration);
- ``gates``: ``ConfirmationGate``, how a gated call obtains its approval (default ``ConfiguredGates`` over a
  ``HostReferenceGate`` and an ``ElicitationGate``);
- ``oracle``: ``ArgumentJudge``, the contract's argument rules (default ``ArgumentOracle``);
- ``deadlines``: ``Deadlines``, whether a call's host deadline has passed at each stage (default ``BindingDeadlines``);
- ``engine``: the operations over the store (``Engine``; its ``recall`` and ``lifecycle`` classes may be subclassed).

A call travels as one ``CallContext`` from the MCP edge to the store's unit of work.
"""

from engram_mcp.reference._call import BindingDeadlines, CallContext, Deadlines, DeadlineStage, UnitHooks
from engram_mcp.reference._config import ServerConfig, load_config
from engram_mcp.reference._core import Engine
from engram_mcp.reference._gates import (
    ConfiguredGates,
    ConfirmationGate,
    ElicitationGate,
    GateCall,
    HostReferenceGate,
)
from engram_mcp.reference._host_binding import Grants, HostBinding, SignedBindings
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._serve import BearerGuard, http_app, run_stdio
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._wiring import ArgumentJudge, ServerPorts, build_ports, default_gates, open_store

__all__ = ["ArgumentJudge", "BearerGuard", "BindingDeadlines", "CallContext", "ConfiguredGates", "ConfirmationGate",
           "DeadlineStage", "Deadlines", "ElicitationGate", "Engine", "GateCall", "Grants", "HostBinding",
           "HostReferenceGate", "ReferenceServer", "ScopePolicy", "ServerConfig", "ServerPorts", "SignedBindings",
           "UnitHooks", "build_ports", "default_gates", "http_app", "load_config", "open_store", "run_stdio"]
