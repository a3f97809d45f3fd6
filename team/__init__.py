"""Team memory: this machine's memory of shared projects pushed to one PostgreSQL, the others' pulled back (docs/team.md)."""
