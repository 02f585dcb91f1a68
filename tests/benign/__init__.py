"""The benign catalog: servers that differ from the reference only where contract 1.0.0 leaves them free."""
