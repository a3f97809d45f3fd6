"""Developers' tools of this checkout (not installed): a regular package, so `tools` is found here first."""
