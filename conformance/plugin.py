"""The conformance suite as a pytest plugin (public).

Installed, the package registers this module under the ``pytest11`` entry
point ``engram_mcp.conformance.plugin``; ``-p engram_mcp.conformance.plugin``
loads it where plugin autoloading is off. The plugin does nothing until a run
names its target::

    pytest --pyargs engram_mcp.conformance.suite -p engram_mcp.conformance.plugin \\
        --target stdio:'my-server' --profile host.toml

The hooks and fixtures live in ``_plugin``, which this module pulls in through
``pytest_plugins`` so that pytest registers them once, whichever name loaded
them. ``run_suite`` runs the suite in-process and returns its verdict as a
value; ``run_of(config)`` gives a session's Run.
"""

from __future__ import annotations

from engram_mcp.conformance._plugin import Outcome, run_of, run_suite
from engram_mcp.conformance._run import Result, Run, ServerInfo

pytest_plugins = ["engram_mcp.conformance._plugin"]

__all__ = ["Outcome", "Result", "Run", "ServerInfo", "run_of", "run_suite"]
