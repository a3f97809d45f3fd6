"""sessionmem: persistent memory for coding agents.

Kept free of imports: the hooks import ``sessionmem.privacy`` on their hot path.
"""

__version__ = "0.1.0"
