"""Exceptions the contract package raises (its error *table* is data: ``load().errors``)."""

from engram_mcp.contract.binding import BindingRejected, StateRejected

__all__ = ["BindingRejected", "StateRejected"]
