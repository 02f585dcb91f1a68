"""Exceptions the conformance harness raises to its callers and host adapters."""

from engram_mcp.conformance._certificate import CertificateError
from engram_mcp.conformance._certificate_verify import UnreadableInput
from engram_mcp.conformance._checks import HarnessError
from engram_mcp.conformance._connect import EraUnsupported, TargetUnreachable
from engram_mcp.conformance._profile import ProfileError

__all__ = ["CertificateError", "EraUnsupported", "HarnessError", "ProfileError", "TargetUnreachable", "UnreadableInput"]
