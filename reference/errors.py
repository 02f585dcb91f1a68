"""Exceptions the reference server raises, all ReferenceServerError; none of their text ever reaches a client."""

from engram_mcp.reference._config import ConfigError, StoreUnavailable
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._errors import ReferenceServerError
from engram_mcp.reference._ports import SealBroken
from engram_mcp.reference._quotas import SettingError

__all__ = ["ConfigError", "ReferenceServerError", "Refusal", "SealBroken", "SettingError", "StoreUnavailable"]
