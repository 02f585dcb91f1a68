"""The contract restated as data: tools, error table, limits, rules, requirement catalog (data only)."""
