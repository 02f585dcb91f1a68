"""Assembling a reference server: its configuration, its ports and the server itself.

The one public way to build and run the reference in a program of your own::

    from engram_mcp.reference.server import ReferenceServer, build_ports, load_config

    config = load_config("engram/server.toml")
    server = ReferenceServer(config, build_ports(config))  # or ServerPorts(store=…, cipher=…, policies=…)

    run_stdio(server)  # one MCP session over stdin/stdout; or serve http_app(server, host, port) with any ASGI server

``build_ports`` opens what the configuration names (the SQLite file, or PostgreSQL when ``[store] url``
says so); pass a ``ServerPorts`` of your own to run the same server on another store, cipher or
admission policy (the Protocols are in ``engram_mcp.reference.ports``).
"""

from engram_mcp.reference._config import ServerConfig, load_config
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._serve import http_app, run_stdio
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._wiring import ServerPorts, build_ports, open_store

__all__ = ["ReferenceServer", "ScopePolicy", "ServerConfig", "ServerPorts", "build_ports", "http_app", "load_config",
           "open_store", "run_stdio"]
