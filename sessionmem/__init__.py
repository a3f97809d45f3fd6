"""sessionmem: persistent memory for coding agents."""
