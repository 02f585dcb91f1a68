"""Exceptions the reference server raises; none of their text ever reaches a client."""

from engram_mcp.reference._config import ConfigError, StoreUnavailable
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._ports import SealBroken
from engram_mcp.reference._quotas import SettingError

__all__ = ["ConfigError", "Refusal", "SealBroken", "SettingError", "StoreUnavailable"]
