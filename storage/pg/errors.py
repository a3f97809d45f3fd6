"""The team database's error for its callers, importable without the database driver.

The worker, its searches and its routes catch :class:`TeamUnavailable` whether or not team
memory is configured; importing it from here keeps psycopg (about a tenth of a worker's start)
out of a worker that has no ``database_url``.
"""

from __future__ import annotations


class TeamUnavailable(Exception):
    """The team database cannot be used right now: unreachable, the connection lost, or a schema
    newer than this code. Nothing of the failed call happened, or it happened whole; try again
    later. The message never contains the password."""
