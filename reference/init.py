"""``engram-reference init`` as a call: a working server configuration and the matching conformance profile.

The one door through which the conformance harness starts the bundled
reference (tests/test_layering.py holds it to that).
"""

from engram_mcp.reference._init import write_configuration

__all__ = ["write_configuration"]
