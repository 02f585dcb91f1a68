"""Exceptions the conformance harness raises to its callers and host adapters, all ConformanceError."""

from engram_mcp.conformance._certificate import CertificateError
from engram_mcp.conformance._certificate_verify import UnreadableInput
from engram_mcp.conformance._checks import HarnessError
from engram_mcp.conformance._cli_bridge import UsageError as BridgeUsageError
from engram_mcp.conformance._connect import EraUnsupported, TargetUnreachable
from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._explore import CounterexampleError
from engram_mcp.conformance._profile import ProfileError

__all__ = [
    "BridgeUsageError",
    "CertificateError",
    "ConformanceError",
    "CounterexampleError",
    "EraUnsupported",
    "HarnessError",
    "ProfileError",
    "TargetUnreachable",
    "UnreadableInput",
]
