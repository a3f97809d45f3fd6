"""The hook process Claude Code runs at each lifecycle stage (``entry.py``); standard library only."""
