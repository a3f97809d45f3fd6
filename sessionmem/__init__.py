"""sessionmem: persistent memory for coding agents.

Kept free of imports. (Hook processes do not even run this file: ``hooks/entry.py``
registers the package without it.)
"""

__version__ = "0.1.0"
